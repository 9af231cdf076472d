"""The ``Shard*`` strategies of models sharded across processes: ``ShardModelParallelStrategy``, Lightning's
``ModelParallelStrategy`` (FSDP2 x tensor parallel) with batch-level sharding over its mesh's data-parallel
dimension (docs/DESIGN.md, "What the mesh decides"), and ``ShardFSDPStrategy``, Lightning's ``FSDPStrategy``
with batch-level sharding over every process."""

from __future__ import annotations

from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
from torch.distributed.fsdp import FullyShardedDataParallel
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
