"""Batch-level data sharding across processes for PyTorch Lightning, exact and resumable."""

import importlib.util

from lightning_shard.audit import AuditReport, ShardAudit
from lightning_shard.batch_sampler_shard import BatchSamplerShard
from lightning_shard.dispatcher import DataLoaderDispatcher
from lightning_shard.iterable_shard import IterableDatasetShard
from lightning_shard.loader_shard import DataLoaderShard
from lightning_shard.optim import ShardOptimizer, ShardScheduler
from lightning_shard.options import ShardOptions
from lightning_shard.prepare import prepare_data_loader, skip_first_batches
from lightning_shard.samplers import SeedableRandomSampler, SkipBatchSampler
from lightning_shard.state import LoaderState

__all__ = [
    "AuditReport",
    "BatchSamplerShard",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "IterableDatasetShard",
    "LoaderState",
    "SeedableRandomSampler",
    "ShardAudit",
    "ShardOptimizer",
    "ShardOptions",
    "ShardScheduler",
    "SkipBatchSampler",
    "prepare_data_loader",
    "skip_first_batches",
]
__version__ = "0.1.0"

# NOTE: the Lightning adapter comes last, and only where Lightning is installed: importing it registers
# the "shard" and "shard_spawn" strategies, so `Trainer(strategy="shard")` works after
# `import lightning_shard`. The core modules above never import Lightning.
if importlib.util.find_spec("lightning") is not None:
    from lightning_shard.lightning import ShardDataModule, ShardPlan, ShardStrategy

    __all__ += ["ShardDataModule", "ShardPlan", "ShardStrategy"]
