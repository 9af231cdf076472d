"""``ShardFSDPStrategy``: Lightning's ``FSDPStrategy`` with batch-level sharding over every process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import FSDPStrategy
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.nn import Module
from typing_extensions import override

from lightning_shard.lightning.keywords import check_keywords
from lightning_shard.lightning.sharding import StrategySharding
from lightning_shard.lightning.strategy import ShardingHooks
from lightning_shard.sampling.balance import EvenBatches
from lightning_shard.sampling.native_stream import IterableSharding

WrapPolicy = set[type[Module]] | Callable[[Module, bool, int], bool] | ModuleWrapPolicy
"""What ``FSDPStrategy`` takes as ``auto_wrap_policy`` / ``activation_checkpointing_policy``."""


class ShardFSDPStrategy(ShardingHooks, FSDPStrategy):
    """``FSDPStrategy`` whose loaders are sharded by ``prepare_data_loader`` instead of ``DistributedSampler``.

    FSDP shards parameters, not data: every process is a data-parallel process (also with
    ``HYBRID_SHARD`` and a ``device_mesh``, whose two dimensions both replicate data), so the sharding is
    ``ShardStrategy``'s. Like ``FSDPStrategy`` it needs CUDA. Registered as ``"shard_fsdp"``.

    ``FSDPStrategy``'s arguments, from ``accelerator`` to ``device_mesh``, mean what they mean there.
    Keyword arguments: the options of ``ShardOptions`` and ``StrategyOptions`` (the options table);
    ``rng_types`` defaults to ``("generator",)`` here.

    Args:
        **kwargs: passed to ``FullyShardedDataParallel``, as ``FSDPStrategy`` does.

    Raises:
        ValueError / TypeError: on inconsistent options (see ``ShardOptions`` and ``StrategyOptions``).
        TypeError: on a keyword that is neither an option nor an argument of ``FSDPStrategy`` or
            ``FullyShardedDataParallel``, naming the closest one.
    """

    REGISTERED_NAMES = (("shard_fsdp", {}),)

    def __init__(
        self,
        accelerator: pl.accelerators.Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        cpu_offload: bool | CPUOffload | None = None,
        mixed_precision: MixedPrecision | None = None,
        auto_wrap_policy: WrapPolicy | None = None,
        activation_checkpointing: type[Module] | list[type[Module]] | None = None,
        activation_checkpointing_policy: WrapPolicy | None = None,
        sharding_strategy: ShardingStrategy
        | Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"] = "FULL_SHARD",
        state_dict_type: Literal["full", "sharded"] = "full",
        device_mesh: tuple[int, int] | DeviceMesh | None = None,
        *,
        split_batches: bool = False,
        even_batches: EvenBatches = True,
        dispatch_batches: bool | None = None,
        put_on_device: bool = False,
        rng_types: Sequence[str] | None = ("generator",),
        use_seedable_sampler: bool = False,
        data_seed: int | None = None,
        non_blocking: bool = False,
        use_stateful_dataloader: bool = False,
        slice_fn_for_dispatch: Callable[..., Any] | None = None,
        iterable_sharding: IterableSharding = "auto",
        scalable_shuffle: bool = False,
        step_scheduler_with_optimizer: bool = True,
        audit: bool = False,
        audit_raise: bool = False,
        gather_predictions: bool = True,
        **kwargs: Any,
    ) -> None:
        check_keywords(type(self), kwargs, (FSDPStrategy.__init__, FullyShardedDataParallel.__init__))
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
            process_group_backend=process_group_backend,
            timeout=timeout,
            cpu_offload=cpu_offload,
            mixed_precision=mixed_precision,
            auto_wrap_policy=auto_wrap_policy,
            activation_checkpointing=activation_checkpointing,
            activation_checkpointing_policy=activation_checkpointing_policy,
            sharding_strategy=sharding_strategy,
            state_dict_type=state_dict_type,
            device_mesh=device_mesh,
            **kwargs,
        )
        self._sharding = StrategySharding(self, locals())

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
