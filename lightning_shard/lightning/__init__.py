"""The Lightning adapter: the only part of lightning_shard that imports ``lightning``.

Importing it registers the ``Shard*`` strategies in Lightning's and Fabric's strategy registries, as
Lightning's own strategy modules register theirs, so ``Trainer(strategy="shard")`` works after
``import lightning_shard``.
"""

from lightning.fabric.strategies import STRATEGY_REGISTRY
from lightning.pytorch.strategies import StrategyRegistry

from lightning_shard.lightning.audit_callback import EpochAudit, ShardAuditCallback
from lightning_shard.lightning.datamodule import ShardDataModule
from lightning_shard.lightning.epoch_callback import ShardEpochCallback
from lightning_shard.lightning.fabric import ShardFabricStrategy
from lightning_shard.lightning.model_parallel import ShardFSDPStrategy, ShardModelParallelStrategy
from lightning_shard.lightning.plain_checkpoint import to_plain_checkpoint
from lightning_shard.lightning.plan import ShardPlan
from lightning_shard.lightning.prediction import ShardPredictionWriter
from lightning_shard.lightning.strategy import ShardingHooks, ShardStrategy

for _strategy in (ShardStrategy, ShardModelParallelStrategy, ShardFSDPStrategy):
    _strategy.register_strategies(StrategyRegistry)
ShardFabricStrategy.register_strategies(STRATEGY_REGISTRY)

__all__ = [
    "EpochAudit",
    "ShardAuditCallback",
    "ShardDataModule",
    "ShardEpochCallback",
    "ShardFabricStrategy",
    "ShardFSDPStrategy",
    "ShardModelParallelStrategy",
    "ShardPlan",
    "ShardPredictionWriter",
    "ShardStrategy",
    "ShardingHooks",
    "to_plain_checkpoint",
]
