"""Batch-level data sharding across processes for PyTorch Lightning, exact and resumable.

The core (``sampling``, ``loaders``, ``comm``, ``prepare``, ``options``, ``optim``, ``audit``) imports only
torch and torchdata; ``lightning_shard.lightning`` is the Lightning adapter. Importing this package
imports the adapter too (Lightning is a dependency), which registers the ``"shard"`` strategies.
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
from lightning_shard.loaders.dispatcher import DataLoaderDispatcher, StatefulDataLoaderDispatcher
from lightning_shard.loaders.position import Consumed, ResumeHook
from lightning_shard.loaders.resumable import WorkerCountWarning
from lightning_shard.loaders.shard import DataLoaderShard, StatefulDataLoaderShard
from lightning_shard.loaders.state import LoaderState
from lightning_shard.loaders.streams import StreamReport
from lightning_shard.loaders.variants import stateful_loader_class
from lightning_shard.optim import ShardOptimizer, ShardScheduler
from lightning_shard.options import ShardOptions, StrategyOptions
from lightning_shard.prepare import prepare_data_loader, skip_first_batches
from lightning_shard.sampling.batch_shard import BatchSamplerShard
from lightning_shard.sampling.index_source import SeekableBatchSampler
from lightning_shard.sampling.iterable_shard import IterableDatasetShard
from lightning_shard.sampling.native_stream import NativeStreamShard, ShardableStream, StreamShardingWarning
from lightning_shard.sampling.samplers import SeedableRandomSampler, SkipBatchSampler

__all__ = [
    "AuditReport",
    "BatchSamplerShard",
    "Consumed",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "IterableDatasetShard",
    "LoaderState",
    "NativeStreamShard",
    "ResumeHook",
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
    "StreamReport",
    "StreamShardingWarning",
    "StrategyOptions",
    "WorkerCountWarning",
    "prepare_data_loader",
    "skip_first_batches",
    "stateful_loader_class",
]
__version__ = "0.2.0"
