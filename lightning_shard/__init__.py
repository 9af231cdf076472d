"""Batch-level data sharding across processes for PyTorch Lightning, exact and resumable.

The core (``sampling``, ``loaders``, ``comm``, ``prepare``, ``options``, ``optim``, ``audit``) imports only
torch and torchdata; ``lightning_shard.lightning`` is the Lightning adapter, which importing this package
imports too (registering the ``"shard"`` strategies). The top level holds what a user calls, implements or
catches; the parts a loop or a strategy plugs into are imported from the module that owns them
(docs/reference.md lists each with its module).
"""

from lightning_shard.audit import AuditReport, ShardAudit
from lightning_shard.lightning import (
    ShardDataModule,
    ShardFabricStrategy,
    ShardFSDPStrategy,
    ShardModelParallelStrategy,
    ShardPlan,
    ShardPredictionWriter,
    ShardStrategy,
)
from lightning_shard.loaders.resumable import WorkerCountWarning
from lightning_shard.loaders.shard import (
    DataLoaderDispatcher,
    DataLoaderShard,
    StatefulDataLoaderDispatcher,
    StatefulDataLoaderShard,
)
from lightning_shard.loaders.state import LoaderState
from lightning_shard.optim import ShardOptimizer, ShardScheduler
from lightning_shard.options import ShardOptions
from lightning_shard.prepare import prepare_data_loader, skip_first_batches
from lightning_shard.sampling.batch_shard import BatchSamplerShard
from lightning_shard.sampling.iterable_shard import IterableDatasetShard
from lightning_shard.sampling.native_stream import ShardableStream, StreamShardingWarning
from lightning_shard.sampling.samplers import SeedableRandomSampler, SeekableBatchSampler, SkipBatchSampler

__all__ = [
    "AuditReport",
    "BatchSamplerShard",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "IterableDatasetShard",
    "LoaderState",
    "SeedableRandomSampler",
    "SeekableBatchSampler",
    "ShardAudit",
    "ShardDataModule",
    "ShardFabricStrategy",
    "ShardFSDPStrategy",
    "ShardModelParallelStrategy",
    "ShardOptimizer",
    "ShardOptions",
    "ShardPlan",
    "ShardPredictionWriter",
    "ShardScheduler",
    "ShardStrategy",
    "ShardableStream",
    "SkipBatchSampler",
    "StatefulDataLoaderDispatcher",
    "StatefulDataLoaderShard",
    "StreamShardingWarning",
    "WorkerCountWarning",
    "prepare_data_loader",
    "skip_first_batches",
]
__version__ = "0.5.0"
