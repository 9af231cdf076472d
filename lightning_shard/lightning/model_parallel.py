"""``ShardModelParallelStrategy``: Lightning's ``ModelParallelStrategy`` (FSDP2 x tensor parallel) with
batch-level sharding over its mesh's data-parallel dimension (docs/DESIGN.md, "What the mesh decides")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Literal

from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.pytorch.strategies import ModelParallelStrategy

from lightning_shard.comm.topology import Topology, mesh_topology
from lightning_shard.lightning.sharding import ShardingMixin
from lightning_shard.options import ShardOptions, StrategyOptions
from lightning_shard.sampling.balance import EvenBatches
from lightning_shard.sampling.native_stream import IterableSharding


class ShardModelParallelStrategy(ShardingMixin, ModelParallelStrategy):
    """``ModelParallelStrategy`` whose loaders are sharded over the ``data_parallel`` mesh dimension only.

    Every rank of a tensor-parallel group gets the same batches (with ``dispatch_batches``, rank 0 sends
    each rank the slice of its data-parallel index); the plan, ``ShardDataModule.num_processes``,
    scheduler scaling, ``gather_for_metrics`` and the audit count data-parallel processes, not ranks.
    Apply FSDP2 / tensor parallelism in ``LightningModule.configure_model`` (``self.device_mesh``) as
    with Lightning's strategy. The training loader's position is saved in both checkpoint formats
    (``save_distributed_checkpoint=True``: a directory; ``False``: one file). Registered as
    ``"shard_model_parallel"``.

    Keyword arguments: the loader options (``split_batches``, ``even_batches``, ``dispatch_batches``,
    ``put_on_device``, ``rng_types``, ``use_seedable_sampler``, ``data_seed``, ``non_blocking``,
    ``use_stateful_dataloader``, ``slice_fn_for_dispatch``, ``iterable_sharding``, ``scalable_shuffle``)
    are the fields of
    ``ShardOptions``, and the strategy options (``step_scheduler_with_optimizer``, ``audit``,
    ``audit_raise``, ``gather_predictions``) those of ``StrategyOptions``; the options table documents
    both. ``rng_types`` defaults to ``("generator",)`` here.

    Args:
        data_parallel_size: as for ``ModelParallelStrategy``.
        tensor_parallel_size: as for ``ModelParallelStrategy``.
        save_distributed_checkpoint: as for ``ModelParallelStrategy``.
        process_group_backend: as for ``ModelParallelStrategy``.
        timeout: as for ``ModelParallelStrategy``.

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
    ) -> None:
        options = locals()
        super().__init__(
            data_parallel_size=data_parallel_size,
            tensor_parallel_size=tensor_parallel_size,
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )
        self._init_sharding(ShardOptions.from_kwargs(options), StrategyOptions.from_kwargs(options))
        self._mesh_topology: tuple[Any, Topology] | None = None

    def data_parallel_topology(self) -> Topology:
        """The size and index of the mesh's data-parallel dimension; every rank's index, for dispatch.

        Raises:
            RuntimeError: before the processes have started (the mesh does not exist yet).
        """
        mesh = self.device_mesh
        if self._mesh_topology is None or self._mesh_topology[0] is not mesh:
            self._mesh_topology = (mesh, mesh_topology(mesh))
        return self._mesh_topology[1]
