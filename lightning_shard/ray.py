"""Ray Train's entry point, ``lightning_shard.ray``: ``RayShardStrategy``, ``ShardReportCallback`` and
``restored_checkpoint`` from the adapter module ``lightning_shard.lightning.ray``. Importing it imports Ray
(the ``ray`` extra); ``import lightning_shard`` does not (docs/guides/multi-machine.md)."""

from lightning_shard.lightning.ray import RayShardStrategy, ShardReportCallback, restored_checkpoint

__all__ = ["RayShardStrategy", "ShardReportCallback", "restored_checkpoint"]
