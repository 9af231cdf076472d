"""The Lightning adapter: the only part of lightning_shard that imports ``lightning``.

Importing it registers ``ShardStrategy`` in Lightning's ``StrategyRegistry`` as ``"shard"`` and
``"shard_spawn"``, so ``Trainer(strategy="shard")`` works after ``import lightning_shard``.
"""

from lightning.pytorch.strategies import StrategyRegistry

from lightning_shard.lightning.audit_callback import EpochAudit, ShardAuditCallback
from lightning_shard.lightning.callback import ShardEpochCallback
from lightning_shard.lightning.datamodule import ShardDataModule
from lightning_shard.lightning.plan import ShardPlan
from lightning_shard.lightning.strategy import ShardStrategy


def register_strategies() -> None:
    """Register ``"shard"`` and ``"shard_spawn"`` in Lightning's ``StrategyRegistry`` (idempotent)."""
    ShardStrategy.register_strategies(StrategyRegistry)


register_strategies()

__all__ = [
    "EpochAudit",
    "ShardAuditCallback",
    "ShardDataModule",
    "ShardEpochCallback",
    "ShardPlan",
    "ShardStrategy",
    "register_strategies",
]
