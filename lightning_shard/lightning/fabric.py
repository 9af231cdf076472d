"""``ShardFabricStrategy``: batch-level sharding for ``lightning.fabric.Fabric``, through
``fabric.setup_dataloaders`` (docs/DESIGN.md, "Lightning adapter")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lightning.fabric.strategies import DDPStrategy
from torch.nn import Module
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer
from torch.utils.data import DataLoader
from typing_extensions import override

from lightning_shard.comm.collectives import destroy_group_at_exit
from lightning_shard.comm.random_states import own_part, own_state, restore, resume_notice
from lightning_shard.comm.topology import Topology
from lightning_shard.lightning._private import RegisteredNames
from lightning_shard.lightning.random_state_files import KEY, name_checkpoint, read_own, write_own
from lightning_shard.lightning.stages import is_shard_loader, uneven_steps
from lightning_shard.lightning.strategy import DDP_NAMES, check_keywords
from lightning_shard.lightning.torchrun import export_rank_variables
from lightning_shard.loaders.kinds import is_data_loader
from lightning_shard.log import info, warn
from lightning_shard.options import ShardOptions
from lightning_shard.prepare import prepare_with_options
from lightning_shard.sampling.balance import EvenBatches
from lightning_shard.sampling.native_stream import IterableSharding


class ShardFabricStrategy(RegisteredNames, DDPStrategy):
    """Fabric's ``DDPStrategy`` whose ``fabric.setup_dataloaders`` shards with ``prepare_data_loader``.

    Every loader given to ``setup_dataloaders`` is sharded with this strategy's options (whatever its
    ``use_distributed_sampler`` argument: Fabric does not pass it to the strategy). Registered in
    Fabric's registry as ``"shard"`` and ``"shard_spawn"``: ``Fabric(strategy="shard")`` after
    ``import lightning_shard``. Scale ``interval="step"``-like schedulers yourself with
    ``ShardScheduler(scheduler, optimizer, num_processes=fabric.strategy.topology.num_processes)``.

    Keyword arguments: the options of ``ShardOptions`` (the options table); ``rng_types`` defaults to
    ``("generator",)`` here.

    Args:
        **kwargs: any argument of Fabric's ``DDPStrategy`` (``timeout``, ``start_method``, ...).

    Raises:
        ValueError / TypeError: on inconsistent options (see ``ShardOptions``).
        TypeError: on a keyword that is neither an option nor an argument of Fabric's ``DDPStrategy`` or
            ``DistributedDataParallel``, naming the closest one.
    """

    REGISTERED_NAMES = DDP_NAMES

    def __init__(
        self,
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
        **kwargs: Any,
    ) -> None:
        check_keywords(type(self), kwargs, (DDPStrategy.__init__, DistributedDataParallel.__init__))
        super().__init__(**kwargs)
        self.options = ShardOptions.pick(locals())

    @property
    @override
    def distributed_sampler_kwargs(self) -> None:  # type: ignore[override]
        """``None``: Fabric then injects no ``DistributedSampler``; ``process_dataloader`` shards instead."""
        return None

    @override
    def setup_environment(self) -> None:
        super().setup_environment()
        destroy_group_at_exit()
        export_rank_variables(self)

    @property
    def topology(self) -> Topology:
        """The data-parallel size and this process's index in it: every process of the job."""
        return Topology(self.world_size, self.global_rank)

    @override
    def process_dataloader(self, dataloader: DataLoader) -> DataLoader:
        """``dataloader`` sharded with this strategy's options (one already sharded is kept)."""
        if not is_data_loader(dataloader) or is_shard_loader(dataloader):
            return dataloader
        loader = prepare_with_options(dataloader, self.options, self.topology, device=self.root_device)
        problem = uneven_steps(loader, self.options, self.topology)
        if problem is not None:
            # NOTE: Fabric cannot tell a training loader from an evaluation one, where this is what is wanted.
            warn(
                f"{problem} (A warning, not a refusal: Fabric does not say whether a loader trains, and an "
                "evaluation loop reads it whole.)"
            )
        return loader

    @override
    def save_checkpoint(
        self,
        path: str | Path,
        state: dict[str, Module | Optimizer | Any],
        storage_options: Any | None = None,
        filter: dict[str, Callable[[str, Any], bool]] | None = None,
    ) -> None:
        """Fabric's save, with process 0's random states; each other process writes its own beside it."""
        entry = own_part()
        name_checkpoint(entry, path)
        super().save_checkpoint(path, {**state, KEY: entry}, storage_options, filter)
        write_own(self.checkpoint_io, path, entry, storage_options)

    @override
    def load_checkpoint(
        self,
        path: str | Path,
        state: Module | Optimizer | dict[str, Module | Optimizer | Any] | None = None,
        strict: bool = True,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        """Fabric's load; this process's random states are restored when as many processes saved them."""
        options = {} if weights_only is None else {"weights_only": weights_only}
        remainder = super().load_checkpoint(path, state, strict, **options)
        saved = remainder.pop(KEY, None) if isinstance(remainder, dict) else None
        if saved:
            own = own_state(read_own(self.checkpoint_io, path, saved, **options))
            notice = resume_notice(saved)
            if own is not None:
                restore(own)
            elif notice is not None:
                info(notice)
        return remainder
