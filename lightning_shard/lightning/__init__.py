"""The Lightning adapter: the only part of lightning_shard that imports ``lightning``.

Importing it registers the ``Shard*`` strategies in Lightning's ``StrategyRegistry`` (``"shard"``,
``"shard_spawn"``), as Lightning's own strategy modules register theirs, so ``Trainer(strategy="shard")``
works after ``import lightning_shard``.
"""

from lightning.pytorch.strategies import StrategyRegistry

from lightning_shard.lightning.audit_callback import EpochAudit, ShardAuditCallback
from lightning_shard.lightning.datamodule import ShardDataModule
from lightning_shard.lightning.epoch_callback import ShardEpochCallback
from lightning_shard.lightning.plan import ShardPlan
from lightning_shard.lightning.prediction import ShardPredictionWriter
from lightning_shard.lightning.sharding import ShardingMixin
from lightning_shard.lightning.strategy import ShardStrategy

ShardStrategy.register_strategies(StrategyRegistry)

__all__ = [
    "EpochAudit",
    "ShardAuditCallback",
    "ShardDataModule",
    "ShardEpochCallback",
    "ShardPlan",
    "ShardPredictionWriter",
    "ShardStrategy",
    "ShardingMixin",
]
