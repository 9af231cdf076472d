"""``ShardFSDPStrategy``: Lightning's ``FSDPStrategy`` with batch-level sharding over every process."""

from __future__ import annotations

from lightning.pytorch.strategies import FSDPStrategy
from torch.distributed.fsdp import FullyShardedDataParallel
from typing_extensions import override

from lightning_shard.lightning.strategy import ShardingHooks


class ShardFSDPStrategy(ShardingHooks, FSDPStrategy):
    """``FSDPStrategy`` whose loaders are sharded by ``prepare_data_loader`` instead of ``DistributedSampler``.

    FSDP shards parameters, not data: every process is a data-parallel process (also with
    ``HYBRID_SHARD`` and a ``device_mesh``, whose two dimensions both replicate data), so the sharding is
    ``ShardStrategy``'s. Like ``FSDPStrategy`` it needs CUDA. Registered as ``"shard_fsdp"``.

    Keyword arguments: the options of ``ShardOptions`` and ``StrategyOptions`` (the options table);
    ``rng_types`` defaults to ``("generator",)`` here.

    Args:
        **kwargs: any ``FSDPStrategy`` argument (``sharding_strategy``, ``state_dict_type``, ``cpu_offload``,
            ``device_mesh``, ...), meaning what it means there; any other keyword is passed to
            ``FullyShardedDataParallel``, as ``FSDPStrategy`` does.

    Raises:
        ValueError / TypeError: on inconsistent options (see ``ShardOptions`` and ``StrategyOptions``).
        TypeError: on a keyword that is neither an option nor an argument of ``FSDPStrategy`` or
            ``FullyShardedDataParallel``, naming the closest one.
    """

    REGISTERED_NAMES = (("shard_fsdp", {}),)
    KEYWORD_PARENTS = (FSDPStrategy.__init__, FullyShardedDataParallel.__init__)

    @override
    def setup_environment(self) -> None:
        """Refuse a CPU run before the process group starts, with the fix (FSDP itself would fail later).

        Raises:
            ValueError: if the devices are CPUs.
        """
        # NOTE: Lightning refuses `FSDPStrategy` on CPU only for its own class and names, not a subclass.
        if self.root_device.type == "cpu":
            raise ValueError(
                f"`{type(self).__name__}` runs FSDP, which needs CUDA devices, but this trainer has "
                f"`accelerator='cpu'`. Use `accelerator='cuda'`, or on CPU `ShardModelParallelStrategy` with "
                "`fully_shard` (FSDP2) in `configure_model`."
            )
        super().setup_environment()
