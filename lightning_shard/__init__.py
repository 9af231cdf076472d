"""Batch-level data sharding across processes for PyTorch Lightning, exact and resumable."""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

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

# NOTE: the Lightning adapter (`lightning_shard.lightning`) is imported together with Lightning: now if
# Lightning is loaded already, otherwise right after `lightning.pytorch` has loaded. Importing it registers
# the "shard" and "shard_spawn" strategies, so `Trainer(strategy="shard")` works after `import
# lightning_shard` in either import order, while code using only the core never pays for importing Lightning.
_ADAPTER_NAMES = ("ShardDataModule", "ShardPlan", "ShardStrategy")
__all__ += list(_ADAPTER_NAMES)

if TYPE_CHECKING:
    from lightning_shard.lightning import ShardDataModule as ShardDataModule
    from lightning_shard.lightning import ShardPlan as ShardPlan
    from lightning_shard.lightning import ShardStrategy as ShardStrategy


def __getattr__(name: str) -> Any:
    if name in _ADAPTER_NAMES:
        return getattr(importlib.import_module("lightning_shard.lightning"), name)
    raise AttributeError(f"module 'lightning_shard' has no attribute {name!r}")


class _ImportAdapterWithLightning(importlib.abc.MetaPathFinder):
    """Imports the adapter as soon as ``lightning.pytorch`` has been executed, then steps aside."""

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "lightning.pytorch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def execute_then_import_adapter(module: types.ModuleType) -> None:
                execute(module)
                importlib.import_module("lightning_shard.lightning")

            spec.loader.exec_module = execute_then_import_adapter  # type: ignore[method-assign]
        return spec


if "lightning.pytorch" in sys.modules:
    importlib.import_module("lightning_shard.lightning")
elif importlib.util.find_spec("lightning") is not None:
    sys.meta_path.insert(0, _ImportAdapterWithLightning())
