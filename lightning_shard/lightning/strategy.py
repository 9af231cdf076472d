"""``ShardStrategy``: Lightning's DDP with batch-level sharding, process-scaled schedulers and exact resume;
``ShardingHooks``, the constructor (the options) and the hooks every ``Shard*`` strategy shares, each hook
calling its ``StrategySharding``; and ``check_keywords``, which refuses an unknown keyword when a strategy
is built, naming the closest known one: Lightning would pass it on to torch's wrapper only when the fit
sets the model up (docs/DESIGN.md, "Options")."""

from __future__ import annotations

import difflib
import inspect
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy, ParallelStrategy
from torch.nn import Module
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer
from typing_extensions import override

from lightning_shard.comm.collectives import destroy_group_at_exit, is_distributed
from lightning_shard.comm.topology import Topology
from lightning_shard.lightning._private import RegisteredNames, saved_callback_states
from lightning_shard.lightning.audit_callback import EpochAudit
from lightning_shard.lightning.plan import ShardPlan
from lightning_shard.lightning.random_state_files import (
    KEY,
    name_checkpoint,
    read_own,
    remove_others,
    write_own,
)
from lightning_shard.lightning.schedulers import SchedulerScaling, wrap_optimizers, wrap_schedulers
from lightning_shard.lightning.sharding import StrategySharding
from lightning_shard.lightning.stages import ShardLoader
from lightning_shard.lightning.torchrun import export_rank_variables
from lightning_shard.loaders.streams import StreamReport
from lightning_shard.options import ShardOptions, StrategyOptions
from lightning_shard.sampling.balance import EvenBatches
from lightning_shard.sampling.native_stream import IterableSharding

DDP_NAMES = (
    ("shard", {"start_method": "popen"}),
    ("shard_spawn", {"start_method": "spawn"}),
    ("shard_notebook", {"start_method": "fork"}),
)
"""The registered names of ``ShardStrategy`` and ``ShardFabricStrategy``, as Lightning's DDP ones."""

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_NOT_OURS_TO_PASS = frozenset({"self", "module"})
"""Parameters a parent fills itself (``module``: the model the wrapper wraps)."""


SET_BY_THE_STRATEGY = {
    "dataloader": "the strategy shards each loader the trainer is given",
    "device": "the strategy sets this from the process group (each process's device)",
    "num_processes": "the strategy sets this from the process group",
    "process_index": "the strategy sets this from the process group",
    "torch_device_mesh": "the strategy sets this from the process group (and its device mesh)",
}
"""``prepare_data_loader``'s parameters that are not options, and where a strategy takes each from: passed
to a strategy, they would otherwise be taken for a misspelt ``process_group`` or ``device_mesh``."""


def parameter_names(function: Callable[..., Any]) -> list[str]:
    """The names ``function`` takes by keyword (its ``**kwargs`` and ``self`` excluded)."""
    parameters = inspect.signature(function).parameters.values()
    return [p.name for p in parameters if p.kind in _NAMED and p.name not in _NOT_OURS_TO_PASS]


def check_keywords(strategy: type, passed: Mapping[str, Any], parents: Sequence[Callable[..., Any]]) -> None:
    """Refuse (``TypeError``, with the closest known name) a keyword of ``passed``, those the ``__init__`` of
    ``strategy`` passes on, that none of ``parents`` (the callables they end up in) takes."""
    accepted = {name for parent in parents for name in parameter_names(parent)}
    unknown = [name for name in passed if name not in accepted]
    if not unknown:
        return
    name, owner = unknown[0], strategy.__name__
    owners = " or ".join(f"`{parent.__qualname__.split('.')[0]}`" for parent in parents)
    close = difflib.get_close_matches(name, sorted(set(parameter_names(strategy)) | accepted), n=1)
    # NOTE: a character that only looks like an ASCII one is named.
    foreign = [char for char in name if not char.isascii()]
    described = ", ".join(f"{char!r} U+{ord(char):04X} {unicodedata.name(char, '?')}" for char in foreign)
    look_alike = f" (it holds the non-ASCII {described})" if foreign else ""
    fix = (
        f"`{name}` is an argument of `prepare_data_loader`, not an option: {SET_BY_THE_STRATEGY[name]}. Remove it."
        if name in SET_BY_THE_STRATEGY
        else f"Did you mean `{close[0]}`?"
        if close
        else f"Use an option of the options table or an argument of {owners}."
    )
    raise TypeError(
        f"`{owner}` got an unknown keyword argument `{name}={passed[name]!r}`{look_alike}: it is "
        f"neither an option of `{owner}` nor an argument of {owners}. {fix}"
    )


class ShardingHooks(RegisteredNames, ParallelStrategy):
    """The constructor, the Lightning hooks and the public surface of every ``Shard*`` strategy.

    ``__init__`` takes the options as flat keyword-only arguments (LightningCLI builds them from YAML),
    refuses a keyword that none of ``KEYWORD_PARENTS`` takes, passes the others to the Lightning parent and
    keeps the ``StrategySharding`` built from the options as ``_sharding``; every other member calls
    Lightning's implementation and ``_sharding``. A strategy lists it before one of Lightning's
    (``ShardStrategy(ShardingHooks, DDPStrategy)``) and sets ``KEYWORD_PARENTS``.
    """

    KEYWORD_PARENTS: ClassVar[tuple[Callable[..., Any], ...]]
    """Where the keywords that are not options end up: the Lightning parent's ``__init__``, and that of the
    torch wrapper it hands its own ``**kwargs`` to."""

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
        step_scheduler_with_optimizer: bool = True,
        audit: bool = False,
        audit_raise: bool = False,
        gather_predictions: bool = True,
        **kwargs: Any,
    ) -> None:
        check_keywords(type(self), kwargs, self.KEYWORD_PARENTS)
        super().__init__(**kwargs)
        self._sharding = StrategySharding(self, locals())

    # -- what the strategy is -----------------------------------------------------------------------
    @property
    def options(self) -> ShardOptions:
        """The loader options (a ``ShardDataModule`` may override them per stage)."""
        return self._sharding.options

    @property
    def strategy_options(self) -> StrategyOptions:
        """The strategy options (scheduler scaling, audit, gathered predictions)."""
        return self._sharding.strategy_options

    @property
    def step_scheduler_with_optimizer(self) -> bool:
        """Whether ``interval="step"`` schedulers step once per process per optimizer step."""
        return self._sharding.strategy_options.step_scheduler_with_optimizer

    def data_parallel_topology(self) -> Topology:
        """Who shares the data: every process of the job, unless the strategy says otherwise."""
        return Topology(self.world_size, self.global_rank)

    @property
    def topology(self) -> Topology:
        """The data-parallel size and this process's index in it."""
        return self.data_parallel_topology()

    @property
    def shard_plan(self) -> ShardPlan | None:
        """The plan of the running (or last) fit; ``None`` before a fit has started."""
        return self._sharding.shard_plan

    @property
    def scheduler_scaling(self) -> SchedulerScaling:
        """How ``interval="step"`` schedulers are stepped in this run."""
        return self._sharding.scheduler_scaling

    @property
    def estimated_scheduler_steps(self) -> int:
        """How many times this fit steps an ``interval="step"`` scheduler: size a ``OneCycleLR`` with it.

        ``trainer.estimated_stepping_batches`` (optimizer steps) times the scheduler scaling factor.

        Raises:
            ValueError: if the fit has no bound (``max_epochs=-1`` and no ``max_steps``).
        """
        total = self._sharding.trainer.estimated_stepping_batches
        if total == float("inf"):
            raise ValueError(
                "`estimated_scheduler_steps` needs a bounded fit, but this trainer has no `max_steps` and "
                "`max_epochs=-1`. Set `max_steps` (or `max_epochs`) on the `Trainer`."
            )
        return int(total) * self.scheduler_scaling.factor

    @property
    def stream_reports(self) -> list[StreamReport]:
        """Each finished training epoch's report of a stream: samples read, padded, left unseen, per process."""
        return self._sharding.epoch_callback.stream_reports

    @property
    def audits(self) -> list[EpochAudit]:
        """The audit of each training epoch so far (with ``audit=True``; the same on every process)."""
        return self._sharding.audit.audits

    @property
    def loaders_left_alone(self) -> bool:
        """Whether the trainer was built with ``use_distributed_sampler=False``: loaders are not sharded."""
        return self._sharding.loaders_left_alone

    def options_for(self, stage: str) -> ShardOptions:
        """The options of ``stage``'s loaders: the strategy's, then the datamodule's overrides.

        Args:
            stage: ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``.
        """
        return self._sharding.options_for(stage)

    def current_loader(self) -> ShardLoader | None:
        """The sharded loader whose batch is being processed (``None`` for a loader we did not shard)."""
        return self._sharding.current_loader()

    def gather_for_metrics(self, data: Any) -> Any:
        """``data`` of every process in process order, without the samples ``even_batches`` repeated.

        ``data`` may be anything (tensors whose rows differ per process, nested structures, lists of
        objects). Validation and test loaders repeat no sample, so they gather as they are, in a step or
        at the epoch's end; a loader that pads its last step has the padding dropped when this is called
        in that step, so a 103-sample set yields 103 rows either way. Every process must call it.

        Raises:
            ValueError: if the current loader is uneven (``even_batches=False``) on several processes, or
                pads and this is called outside a step (the padding can no longer be told apart).
        """
        return self._sharding.gather_for_metrics(data)

    # -- Lightning's hooks --------------------------------------------------------------------------
    @override
    def setup_environment(self) -> None:
        super().setup_environment()
        destroy_group_at_exit()
        export_rank_variables(self)

    @override
    def connect(self, model: pl.LightningModule) -> None:
        super().connect(model)
        self._sharding.connect(model.trainer)

    @override
    def process_dataloader(self, dataloader: object) -> object:
        return self._sharding.process_dataloader(dataloader)

    @override
    def setup_optimizers(self, trainer: pl.Trainer) -> None:
        """Lightning's; then each optimizer as a ``ShardOptimizer``, each ``interval="step"`` scheduler as a
        ``ShardScheduler`` that follows them."""
        super().setup_optimizers(trainer)
        self.optimizers = wrap_optimizers(self.optimizers)
        self.lr_scheduler_configs = wrap_schedulers(
            self.lr_scheduler_configs, self.optimizers, self.scheduler_scaling
        )

    @override
    def optimizer_step(
        self,
        optimizer: Optimizer,
        closure: Callable[[], Any],
        model: pl.LightningModule | Module | None = None,
        **kwargs: Any,
    ) -> Any:
        with self._sharding.stepping(optimizer, self.precision_plugin):
            return super().optimizer_step(optimizer, closure, model, **kwargs)

    @override
    def batch_to_device(self, batch: Any, device: torch.device | None = None, dataloader_idx: int = 0) -> Any:
        self._sharding.batch_moving(dataloader_idx)
        return super().batch_to_device(batch, device, dataloader_idx)

    @override
    def on_train_start(self) -> None:
        super().on_train_start()
        self._sharding.on_train_start(self.lr_scheduler_configs)

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        with self._sharding.in_step():
            return super().training_step(*args, **kwargs)

    @override
    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        with self._sharding.in_step():
            return super().validation_step(*args, **kwargs)

    @override
    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        with self._sharding.in_step():
            return super().test_step(*args, **kwargs)

    @override
    def save_checkpoint(
        self, checkpoint: dict[str, Any], filepath: str | Path, storage_options: Any | None = None
    ) -> None:
        """Lightning's save; then each process but 0 writes its random states beside the checkpoint."""
        entry = saved_callback_states(checkpoint).get(KEY)
        name_checkpoint(entry, filepath)
        super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)
        write_own(self.checkpoint_io, filepath, entry, storage_options)

    @override
    def load_checkpoint(
        self, checkpoint_path: str | Path, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Lightning's load, with this process's random states read from beside the checkpoint."""
        options = {} if weights_only is None else {"weights_only": weights_only}
        checkpoint = super().load_checkpoint(checkpoint_path, **options)
        states = saved_callback_states(checkpoint)
        if isinstance(states.get(KEY), dict):
            states[KEY] = read_own(self.checkpoint_io, checkpoint_path, states[KEY], **options)
        return checkpoint

    @override
    def remove_checkpoint(self, filepath: str | Path) -> None:
        super().remove_checkpoint(filepath)
        remove_others(self.checkpoint_io, filepath, self.is_global_zero)

    @override
    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: Any = "mean") -> Any:
        """Lightning's reduction, except that an integer tensor is averaged over the processes in floating point.

        Lightning truncates the averaged integer batch sizes of ``self.log(..., sync_dist=True)``, which is
        inexact when processes hold different numbers of samples, as balanced evaluation loaders do.
        """
        mean = isinstance(reduce_op, str) and reduce_op.lower() in ("mean", "avg")
        integer = isinstance(tensor, torch.Tensor) and not torch.is_floating_point(tensor)
        if mean and integer and is_distributed():
            total = tensor.to(torch.float64)
            dist.all_reduce(total, group=group)
            return total / dist.get_world_size(group)
        # NOTE: abstract in `ParallelStrategy`; every Lightning strategy a `Shard*` one is built on defines it.
        return super().reduce(tensor, group=group, reduce_op=reduce_op)  # type: ignore[safe-super]


class ShardStrategy(ShardingHooks, DDPStrategy):
    """DDP whose loaders are sharded by ``prepare_data_loader`` instead of Lightning's ``DistributedSampler``.

    Every train / val / test / predict ``DataLoader`` is sharded with this strategy's options (a
    ``ShardDataModule`` can override them per stage): training as configured, validation and test with
    ``even_batches="balanced"`` (no sample repeated, so metrics are exact), predict with ``even_batches=False``
    so each sample is predicted exactly once. Optimizers become ``ShardOptimizer`` and
    ``interval="step"`` schedulers ``ShardScheduler``; the training loader's position is saved in
    Lightning's checkpoints and restored exactly. Registered as ``"shard"``, ``"shard_spawn"`` and
    ``"shard_notebook"`` (forked processes, for Jupyter, as Lightning's ``"ddp_notebook"``).

    Keyword arguments: the options of ``ShardOptions`` and ``StrategyOptions`` (the options table);
    ``rng_types`` defaults to ``("generator",)`` here.

    Args:
        **kwargs: any ``DDPStrategy`` argument (``find_unused_parameters``, ``timeout``, ``start_method``, ...).
            ``timeout`` (default 30 minutes) bounds the wait for a peer that is alive but stuck, and the
            start-up rendezvous; a killed peer ends the others at once on gloo.

    Raises:
        ValueError / TypeError: on inconsistent options (see ``ShardOptions`` and ``StrategyOptions``).
        TypeError: on a keyword that is neither an option nor an argument of ``DDPStrategy`` or
            ``DistributedDataParallel``, naming the closest one.
    """

    REGISTERED_NAMES = DDP_NAMES
    KEYWORD_PARENTS = (DDPStrategy.__init__, DistributedDataParallel.__init__)
