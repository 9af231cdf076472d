"""``ShardingMixin``: the sharding behaviour of every ``Shard*`` strategy, in one place.

Combined before one of Lightning's parallel strategies (``class ShardStrategy(ShardingMixin,
DDPStrategy)``), it prepares each stage's loaders with ``prepare_data_loader`` instead of Lightning's
``DistributedSampler``, wraps optimizers and step schedulers, logs the plan, keeps the training loaders'
position in checkpoints, audits epochs and gathers evaluation outputs exactly. The strategy it is
combined with decides the data-parallel topology (``data_parallel_topology``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch.nn import Module
from torch.optim import Optimizer
from torch.utils.data import DataLoader

from lightning_shard.comm.collectives import is_distributed
from lightning_shard.comm.gather import gather_in_process_order, keep_rows
from lightning_shard.comm.topology import Topology
from lightning_shard.lightning._private import (
    StrategyRegistryType,
    checkpoint_loader_states,
    disable_sampler_injection,
    sampler_injection_enabled,
)
from lightning_shard.lightning.audit_callback import EpochAudit, ShardAuditCallback
from lightning_shard.lightning.checkpoints import EvaluationResumeHook, LightningResumeHook
from lightning_shard.lightning.compat import check_lightning_version
from lightning_shard.lightning.continuity import TrainingLoaderRounds
from lightning_shard.lightning.epoch_callback import ShardEpochCallback
from lightning_shard.lightning.plan import ShardPlan, plan_for
from lightning_shard.lightning.prediction import PredictionGatherer
from lightning_shard.lightning.schedulers import (
    SchedulerScaling,
    short_schedulers,
    warn_short_schedulers,
    wrap_optimizers,
    wrap_schedulers,
)
from lightning_shard.lightning.stages import (
    ShardLoader,
    flatten_loaders,
    is_shard_loader,
    prepare_for_stage,
    stage_defaults,
    stage_key,
)
from lightning_shard.lightning.stream_evaluation import (
    gather_stream_for_metrics,
    is_stream_loader,
    take_stream_padding,
)
from lightning_shard.loaders.state import STATE_FORMAT
from lightning_shard.loaders.streams import StreamReport
from lightning_shard.optim import ShardOptimizer
from lightning_shard.options import ShardOptions, StrategyOptions


class ShardingMixin:
    """What a ``Shard*`` strategy adds to the Lightning strategy it is combined with.

    The strategy's ``__init__`` calls ``_init_sharding`` after its base class's ``__init__``.
    """

    options: ShardOptions
    """The loader options (a ``ShardDataModule`` may override them per stage)."""
    strategy_options: StrategyOptions

    # -- provided by the Lightning strategy this is combined with ---------------------------------
    world_size: int
    global_rank: int
    root_device: torch.device
    optimizers: list[Optimizer]
    lr_scheduler_configs: list[Any]
    precision_plugin: Any

    def _init_sharding(self, options: ShardOptions, strategy_options: StrategyOptions) -> None:
        check_lightning_version()
        self.options = options
        self.strategy_options = strategy_options
        self._shard_plan: ShardPlan | None = None
        self._dataloader_idx = 0
        self._stream_padding = 0
        self._connected_trainer: pl.Trainer | None = None
        self._rounds = TrainingLoaderRounds()
        self._loaders_left_alone = False
        self._epoch_callback = ShardEpochCallback(self._rounds)
        self._predict_callback = PredictionGatherer(self)
        self._stepping = False
        audit = strategy_options.audit
        self._audit_callback = (
            ShardAuditCallback(raise_on_problem=strategy_options.audit_raise) if audit else None
        )

    # -- where we are -------------------------------------------------------------------------------
    @property
    def step_scheduler_with_optimizer(self) -> bool:
        return self.strategy_options.step_scheduler_with_optimizer

    @property
    def topology(self) -> Topology:
        """The data-parallel size and this process's index in it."""
        return self.data_parallel_topology()

    def data_parallel_topology(self) -> Topology:
        """Who shares the data: every process of the job, unless the combined strategy says otherwise."""
        return Topology(self.world_size, self.global_rank)

    def _leads_its_index(self) -> bool:
        """Whether this process speaks for its data-parallel index (its peers under a mesh hold the same data)."""
        return self.global_rank in self.topology.leaders

    @property
    def shard_plan(self) -> ShardPlan | None:
        """The plan of the running (or last) fit; ``None`` before a fit has started."""
        return self._shard_plan

    @property
    def scheduler_scaling(self) -> SchedulerScaling:
        """How ``interval="step"`` schedulers are stepped in this run."""
        return SchedulerScaling(
            enabled=self.step_scheduler_with_optimizer,
            split_batches=self.options_for("train").split_batches,
            num_processes=self.topology.num_processes,
        )

    @property
    def estimated_scheduler_steps(self) -> int:
        """How many times this fit steps an ``interval="step"`` scheduler: size a ``OneCycleLR`` with it.

        ``trainer.estimated_stepping_batches`` (optimizer steps) times the scheduler scaling factor.

        Raises:
            ValueError: if the fit has no bound (``max_epochs=-1`` and no ``max_steps``).
        """
        total = self._trainer.estimated_stepping_batches
        if total == float("inf"):
            raise ValueError(
                "`estimated_scheduler_steps` needs a bounded fit, but this trainer has no `max_steps` and "
                "`max_epochs=-1`. Set `max_steps` (or `max_epochs`) on the `Trainer`."
            )
        return int(total) * self.scheduler_scaling.factor

    @property
    def _trainer(self) -> pl.Trainer:
        if self._connected_trainer is None:
            raise RuntimeError(
                f"`{type(self).__name__}` is not connected to a trainer yet; pass it to `Trainer(strategy=...)`."
            )
        return self._connected_trainer

    @property
    def stream_reports(self) -> list[StreamReport]:
        """Each finished training epoch's report of a stream: samples read, padded, left unseen, per process."""
        return self._epoch_callback.stream_reports

    @property
    def audits(self) -> list[EpochAudit]:
        """The audit of each training epoch so far (with ``audit=True``; the same on every process)."""
        return [] if self._audit_callback is None else self._audit_callback.audits

    def options_for(self, stage: str) -> ShardOptions:
        """The options of ``stage``'s loaders: the strategy's, then the datamodule's overrides.

        Args:
            stage: ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``.
        """
        options = stage_defaults(self.options, stage)
        datamodule = getattr(self._connected_trainer, "datamodule", None)
        overrides = getattr(datamodule, "shard_options", None)
        return options.replace(**overrides(stage)) if callable(overrides) else options

    # -- wiring into the trainer --------------------------------------------------------------------
    def connect(self, model: pl.LightningModule) -> None:
        super().connect(model)  # type: ignore[misc]
        trainer = model.trainer
        if trainer is not self._connected_trainer:
            # NOTE: read before we turn it off: `Trainer(use_distributed_sampler=False)` means "leave my
            # loaders alone", as it does for Lightning's own strategies.
            self._loaders_left_alone = not sampler_injection_enabled(trainer)
            self._connected_trainer = trainer
        disable_sampler_injection(trainer)
        callbacks: list[Any] = getattr(trainer, "callbacks")  # noqa: B009 - set by a connector, unseen by mypy
        # NOTE: before the checkpoint callbacks, as Lightning orders them: a checkpoint written at a step's
        # end must see what this step recorded (the audit), as one written at an epoch's start the epoch.
        first_checkpoint = next(
            (i for i, c in enumerate(callbacks) if isinstance(c, Checkpoint)), len(callbacks)
        )
        ours = [
            c for c in (self._epoch_callback, self._audit_callback, self._predict_callback) if c is not None
        ]
        for callback in reversed(ours):
            if callback not in callbacks:
                callbacks.insert(first_checkpoint, callback)

    @property
    def loaders_left_alone(self) -> bool:
        """Whether the trainer was built with ``use_distributed_sampler=False``: loaders are not sharded."""
        return self._loaders_left_alone

    def process_dataloader(self, dataloader: object) -> object:
        if not isinstance(dataloader, DataLoader) or is_shard_loader(dataloader) or self._loaders_left_alone:
            return dataloader
        trainer = self._trainer
        stage = stage_key(trainer.state.stage)
        options = self.options_for(stage)
        if stage != "train":
            prepared = prepare_for_stage(dataloader, options, self.topology, stage, self.root_device)
            if is_shard_loader(prepared):
                prepared.resume_hook = EvaluationResumeHook()
            return prepared
        position = len(self._rounds.current)
        with self._rounds.building():
            loader = prepare_for_stage(dataloader, options, self.topology, stage, self.root_device)
        self._rounds.add(loader)
        if is_shard_loader(loader):
            loader.set_epoch(trainer.current_epoch)
            loader.resume_hook = LightningResumeHook(
                trainer, loader, lambda: self._epoch_callback.reload_next_epoch(trainer)
            )
            _load_early(loader, checkpoint_loader_states(trainer), position)
            if self._audit_callback is not None:
                self._audit_callback.watch(loader, records=self._leads_its_index())
        return loader

    def setup_optimizers(self, trainer: pl.Trainer) -> None:
        super().setup_optimizers(trainer)  # type: ignore[misc]
        optimizers = wrap_optimizers(self.optimizers)
        self.lr_scheduler_configs = wrap_schedulers(
            self.lr_scheduler_configs, optimizers, self.scheduler_scaling
        )
        self.optimizers = optimizers

    def optimizer_step(
        self,
        optimizer: Optimizer,
        closure: Callable[[], Any],
        model: pl.LightningModule | Module | None = None,
        **kwargs: Any,
    ) -> Any:
        step = super().optimizer_step  # type: ignore[misc]
        scaler = getattr(self.precision_plugin, "scaler", None)
        if isinstance(optimizer, ShardOptimizer) and isinstance(scaler, torch.amp.GradScaler):
            with optimizer.watch_scaler(scaler):
                return step(optimizer, closure, model, **kwargs)
        return step(optimizer, closure, model, **kwargs)

    def batch_to_device(self, batch: Any, device: torch.device | None = None, dataloader_idx: int = 0) -> Any:
        self._dataloader_idx = dataloader_idx
        # NOTE: once per consumed batch, after Lightning's read-ahead (see `lightning/stream_evaluation.py`).
        self._stream_padding = take_stream_padding(self.current_loader())
        return super().batch_to_device(batch, device, dataloader_idx)  # type: ignore[misc]

    def on_train_start(self) -> None:
        super().on_train_start()  # type: ignore[misc]
        trainer = self._trainer
        if self._loaders_left_alone:
            rank_zero_info(
                "lightning_shard: loaders left as they are (`Trainer(use_distributed_sampler=False)`)."
            )
        loaders = [loader for loader in flatten_loaders(trainer.train_dataloader) if is_shard_loader(loader)]
        if not loaders:
            return
        short = short_schedulers(trainer, self.lr_scheduler_configs, self.scheduler_scaling)
        self._shard_plan = plan_for(
            loaders[0],
            self.scheduler_scaling,
            num_training_batches=trainer.num_training_batches,
            accumulate_grad_batches=trainer.accumulate_grad_batches,
            short_schedulers=short,
        )
        rank_zero_info(str(self._shard_plan))
        warn_short_schedulers(short)

    # -- steps --------------------------------------------------------------------------------------
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        with self._in_step():
            return super().training_step(*args, **kwargs)  # type: ignore[misc]

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        with self._in_step():
            return super().validation_step(*args, **kwargs)  # type: ignore[misc]

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        with self._in_step():
            return super().test_step(*args, **kwargs)  # type: ignore[misc]

    @contextmanager
    def _in_step(self) -> Iterator[None]:
        """Mark a step as running: ``gather_for_metrics`` then knows the padding of the current batch."""
        self._stepping = True
        try:
            yield
        finally:
            self._stepping = False

    # -- exact evaluation ---------------------------------------------------------------------------
    def gather_for_metrics(self, data: Any) -> Any:
        """``data`` of every process in process order, without the samples ``even_batches`` repeated.

        ``data`` may be anything: a tensor (rows may differ per process), a nested structure, a list of
        dicts, strings. Validation and test loaders repeat no sample (``even_batches="balanced"``), so
        their outputs are gathered as they are, in a step or at the epoch's end. A loader that pads its
        last step (training, iterable or dispatched data) has the padding dropped when this is called in
        the step of that batch; so gathering a 103-sample set yields exactly 103 rows either way. Every
        process must call it.

        Raises:
            ValueError: if the current loader is uneven (``even_batches=False``) on several processes, or
                pads and this is called outside a step (the padding can no longer be told apart).
        """
        loader = self.current_loader()
        if loader is not None:
            _check_even(loader, self.topology.num_processes)
        padded = loader is not None and loader.pads_last_step
        if padded and not self._stepping:
            raise ValueError(
                "`gather_for_metrics` was called outside a training / validation / test step, with a loader "
                "that pads its last step with repeated samples (`even_batches=True`), so the padding can no "
                "longer be told apart. Call it in the step with that step's outputs, or prepare the loader "
                'with `even_batches="balanced"` (no repeated samples; the default for validation and test).'
            )
        topology = self.topology
        sources = None if topology.rank_indices is None else topology.leaders
        if is_stream_loader(loader):
            return gather_stream_for_metrics(data, self._stream_padding, sources)
        gathered = gather_in_process_order(data, sources)
        if loader is None or not padded or not loader.end_of_dataloader:
            return gathered
        return keep_rows(gathered, slice(0, loader.remainder))

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Lightning's reduction, except that integer tensors are averaged exactly.

        ``self.log(..., sync_dist=True)`` divides the sum of the logged values by the sum of the batch
        sizes, each averaged over the processes; Lightning averages the (integer) batch sizes with
        truncation, which is inexact as soon as processes hold different numbers of samples, as
        balanced evaluation loaders do. Here they are averaged in floating point.
        """
        mean = isinstance(reduce_op, str) and reduce_op.lower() in ("mean", "avg")
        if (
            mean
            and isinstance(tensor, torch.Tensor)
            and not torch.is_floating_point(tensor)
            and is_distributed()
        ):
            total = tensor.to(torch.float64)
            dist.all_reduce(total, group=group)
            return total / dist.get_world_size(group)
        return super().reduce(tensor, group=group, reduce_op=reduce_op)  # type: ignore[misc]

    def current_loader(self) -> ShardLoader | None:
        """The sharded loader whose batch is being processed (``None`` for a loader we did not shard)."""
        loaders = flatten_loaders(_stage_loaders(self._trainer))
        loader = loaders[self._dataloader_idx] if self._dataloader_idx < len(loaders) else None
        return loader if is_shard_loader(loader) else None

    # -- registration -------------------------------------------------------------------------------
    REGISTERED_NAMES: tuple[tuple[str, dict[str, Any]], ...] = ()
    """``(name, init_args)`` under which the strategy registers in Lightning's ``StrategyRegistry``."""

    @classmethod
    def register_strategies(cls, strategy_registry: StrategyRegistryType) -> None:
        for name, init_args in cls.REGISTERED_NAMES:
            if name not in strategy_registry:
                strategy_registry.register(
                    name,
                    cls,
                    description=f"lightning_shard's {cls.__name__} {init_args or ''}".strip(),
                    **init_args,
                )


def _load_early(loader: ShardLoader, states: list[Any], position: int) -> None:
    """Load a checkpoint's state into the loader it is meant for before Lightning measures it.

    Lightning loads it again after measuring; loading the same state twice is harmless.
    """
    state = states[position] if position < len(states) else None
    if isinstance(state, dict) and state.get("format") == STATE_FORMAT:
        loader.load_state_dict(state)


def _stage_loaders(trainer: pl.Trainer) -> Any:
    stage = trainer.state.stage
    if stage == RunningStage.TRAINING:
        return trainer.train_dataloader
    if stage in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING):
        return trainer.val_dataloaders
    if stage == RunningStage.TESTING:
        return trainer.test_dataloaders
    return trainer.predict_dataloaders


def _check_even(loader: ShardLoader, num_processes: int) -> None:
    if num_processes > 1 and not loader.sharding.even_batches:
        raise ValueError(
            "`gather_for_metrics` needs every process to run as many steps, but the current loader has "
            "`even_batches=False`, so a process could wait for the others forever. Keep `even_batches=True` "
            "for validation and test (the default); the padding is dropped when gathering."
        )
