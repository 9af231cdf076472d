"""``ShardModelParallelStrategy``: Lightning's ``ModelParallelStrategy`` (FSDP2 x tensor parallel) with
batch-level sharding over its mesh's data-parallel dimension (docs/DESIGN.md, "What the mesh decides")."""

from __future__ import annotations

from lightning.pytorch.strategies import ModelParallelStrategy
from typing_extensions import override

from lightning_shard.comm.topology import Topology, mesh_topology
from lightning_shard.lightning.strategy import ShardingHooks


class ShardModelParallelStrategy(ShardingHooks, ModelParallelStrategy):
    """``ModelParallelStrategy`` whose loaders are sharded over the ``data_parallel`` mesh dimension only.

    Every rank of a tensor-parallel group gets the same batches; the plan, ``num_processes``, scheduler
    scaling, ``gather_for_metrics`` and the audit count data-parallel processes, not ranks. Apply FSDP2 /
    tensor parallelism in ``LightningModule.configure_model`` (``self.device_mesh``) as with Lightning's
    strategy. The training loader's position is saved in both checkpoint formats. Registered as
    ``"shard_model_parallel"``.

    Keyword arguments: the options of ``ShardOptions`` and ``StrategyOptions`` (the options table);
    ``rng_types`` defaults to ``("generator",)`` here.

    Args:
        **kwargs: any ``ModelParallelStrategy`` argument (``data_parallel_size``, ``tensor_parallel_size``,
            ``save_distributed_checkpoint``, ...), meaning what it means there; any other keyword is
            refused (``TypeError``) with the closest option or argument named.

    Raises:
        ValueError / TypeError: on inconsistent options (see ``ShardOptions`` and ``StrategyOptions``).
    """

    REGISTERED_NAMES = (("shard_model_parallel", {}),)
    KEYWORD_PARENTS = (ModelParallelStrategy.__init__,)

    @override
    def data_parallel_topology(self) -> Topology:
        """The size and index of the mesh's data-parallel dimension; every rank's index, for dispatch.

        Raises:
            RuntimeError: before the processes have started (the mesh does not exist yet).
        """
        return mesh_topology(self.device_mesh)
