"""``ShardModelParallelStrategy``: Lightning's ``ModelParallelStrategy`` (FSDP2 x tensor parallel) with
batch-level sharding over its mesh's data-parallel dimension (docs/DESIGN.md, "What the mesh decides")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Literal

from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.pytorch.strategies import ModelParallelStrategy
from typing_extensions import override

from lightning_shard.comm.topology import Topology, mesh_topology
from lightning_shard.lightning.keywords import check_keywords
from lightning_shard.lightning.sharding import StrategySharding
from lightning_shard.lightning.strategy import ShardingHooks
from lightning_shard.sampling.balance import EvenBatches
from lightning_shard.sampling.native_stream import IterableSharding


class ShardModelParallelStrategy(ShardingHooks, ModelParallelStrategy):
    """``ModelParallelStrategy`` whose loaders are sharded over the ``data_parallel`` mesh dimension only.

    Every rank of a tensor-parallel group gets the same batches; the plan, ``num_processes``, scheduler
    scaling, ``gather_for_metrics`` and the audit count data-parallel processes, not ranks. Apply FSDP2 /
    tensor parallelism in ``LightningModule.configure_model`` (``self.device_mesh``) as with Lightning's
    strategy. The training loader's position is saved in both checkpoint formats. Registered as
    ``"shard_model_parallel"``.

    ``ModelParallelStrategy``'s arguments, from ``data_parallel_size`` to ``timeout``, mean what they mean
    there.
    Keyword arguments: the options of ``ShardOptions`` and ``StrategyOptions`` (the options table);
    ``rng_types`` defaults to ``("generator",)`` here.

    Args:
        **kwargs: an argument a newer ``ModelParallelStrategy`` takes, passed to it; any other keyword is
            refused (``TypeError``) with the closest option or argument named.

    Raises:
        ValueError / TypeError: on inconsistent options (see ``ShardOptions`` and ``StrategyOptions``).
    """

    REGISTERED_NAMES = (("shard_model_parallel", {}),)

    def __init__(
        self,
        data_parallel_size: Literal["auto"] | int = "auto",
        tensor_parallel_size: Literal["auto"] | int = "auto",
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
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
        check_keywords(type(self), kwargs, (ModelParallelStrategy.__init__,))
        super().__init__(
            data_parallel_size=data_parallel_size,
            tensor_parallel_size=tensor_parallel_size,
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            timeout=timeout,
            **kwargs,
        )
        self._sharding = StrategySharding(self, locals())
        self._mesh_topology: tuple[Any, Topology] | None = None

    @override
    def data_parallel_topology(self) -> Topology:
        """The size and index of the mesh's data-parallel dimension; every rank's index, for dispatch.

        Raises:
            RuntimeError: before the processes have started (the mesh does not exist yet).
        """
        mesh = self.device_mesh
        if self._mesh_topology is None or self._mesh_topology[0] is not mesh:
            self._mesh_topology = (mesh, mesh_topology(mesh))
        return self._mesh_topology[1]
