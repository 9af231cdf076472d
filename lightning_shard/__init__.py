"""Batch-level data sharding across processes for PyTorch Lightning, exact and resumable."""

from lightning_shard.batch_sampler_shard import BatchSamplerShard
from lightning_shard.iterable_shard import IterableDatasetShard
from lightning_shard.samplers import SeedableRandomSampler, SkipBatchSampler

__all__ = [
    "BatchSamplerShard",
    "IterableDatasetShard",
    "SeedableRandomSampler",
    "SkipBatchSampler",
]
__version__ = "0.1.0"
