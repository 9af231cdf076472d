"""``StrategySharding``: what every ``Shard*`` strategy adds to Lightning's, in one object it holds and
calls from short overrides of Lightning's hooks (``ShardingHooks``; docs/DESIGN.md, "Lightning adapter");
and the ``ResumeHook``s it sets on the loaders it prepares, which say what a loader state saved in
Lightning's checkpoints holds (docs/DESIGN.md, "Global state", "Elastic resume")."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol, cast

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.types import LRSchedulerConfig
from torch.optim import Optimizer
from torch.utils.data import DataLoader

from lightning_shard.comm.collectives import communication_device
from lightning_shard.comm.gather import gather_in_process_order, keep_rows
from lightning_shard.comm.topology import Topology
from lightning_shard.comm.tree import batch_length, is_tensor_tree, map_leaves
from lightning_shard.lightning._private import (
    add_callbacks_before_checkpoints,
    checkpoint_loader_states,
    disable_sampler_injection,
    sampler_injection_enabled,
    training_batches_ready,
)
from lightning_shard.lightning.audit_callback import ShardAuditCallback
from lightning_shard.lightning.compat import check_lightning_version
from lightning_shard.lightning.epoch_callback import ShardEpochCallback, ShardRandomStatesCallback
from lightning_shard.lightning.left_as_is import checked
from lightning_shard.lightning.plan import ShardPlan, left_alone_plan, plan_for
from lightning_shard.lightning.prediction import PredictionGatherer
from lightning_shard.lightning.schedulers import (
    SchedulerScaling,
    has_step_schedulers,
    short_schedulers,
    warn_short_schedulers,
)
from lightning_shard.lightning.stages import (
    ShardLoader,
    check_even_training,
    flatten_loaders,
    is_shard_loader,
    prepare_for_stage,
    running_loaders,
    stage_defaults,
    stage_key,
)
from lightning_shard.lightning.torchrun import warn_about_store_sharing
from lightning_shard.loaders.kinds import classify_iterable, is_data_loader
from lightning_shard.loaders.position import Consumed, LeftAsItIs
from lightning_shard.loaders.state import STATE_FORMAT
from lightning_shard.log import info, warn
from lightning_shard.optim import ShardOptimizer
from lightning_shard.options import ShardOptions, StrategyOptions


class HostStrategy(Protocol):
    """What ``StrategySharding`` reads of the strategy holding it (known only once its processes run)."""

    @property
    def root_device(self) -> torch.device: ...

    @property
    def global_rank(self) -> int: ...

    def data_parallel_topology(self) -> Topology: ...


class StrategySharding:
    """The sharding state and behaviour of one ``Shard*`` strategy; the strategy's hooks call it.

    ``strategy`` is read only through ``HostStrategy``; of its ``arguments``, those named like a field of
    ``ShardOptions`` or ``StrategyOptions`` are its options. Refuses an unsupported Lightning release.
    """

    def __init__(self, strategy: HostStrategy, arguments: Mapping[str, Any]) -> None:
        check_lightning_version()
        warn_about_store_sharing()
        self._strategy = strategy
        self.options = ShardOptions.pick(arguments)
        self.strategy_options = StrategyOptions.pick(arguments)
        self.shard_plan: ShardPlan | None = None
        self.loaders_left_alone = False
        self.left_as_it_is: dict[str, LeftAsItIs] = {}
        """The training iterables that are neither a ``DataLoader`` nor a recognised pipeline, by type name."""
        self._trainer: pl.Trainer | None = None
        self._dataloader_idx = 0
        self._stream_padding = 0
        self._stepping = False
        self._resumed_batches = 0
        self.epoch_callback = ShardEpochCallback()
        self._rounds = self.epoch_callback.rounds
        self.audit = ShardAuditCallback(raise_on_problem=self.strategy_options.audit_raise)
        # NOTE: bound methods, not lambdas: a strategy is pickled into the processes `"shard_spawn"` starts.
        predictions = PredictionGatherer(strategy.data_parallel_topology, self._predict_split_batches)
        self.callbacks: list[Callback] = [self.epoch_callback, ShardRandomStatesCallback()]
        """The callbacks ``connect`` adds to the trainer."""
        self.callbacks += [self.audit] if self.strategy_options.audit else []
        self.callbacks += [predictions] if self.strategy_options.gather_predictions else []

    # -- where we are -------------------------------------------------------------------------------
    @property
    def topology(self) -> Topology:
        return self._strategy.data_parallel_topology()

    @property
    def trainer(self) -> pl.Trainer:
        """The connected trainer (``RuntimeError`` before the strategy is connected to one)."""
        if self._trainer is None:
            raise RuntimeError(
                f"`{type(self._strategy).__name__}` is not connected to a trainer yet; pass it to "
                "`Trainer(strategy=...)`."
            )
        return self._trainer

    @property
    def scheduler_scaling(self) -> SchedulerScaling:
        return SchedulerScaling(
            enabled=self.strategy_options.step_scheduler_with_optimizer,
            split_batches=self.options_for("train").split_batches,
            num_processes=self.topology.num_processes,
        )

    def options_for(self, stage: str) -> ShardOptions:
        options = stage_defaults(self.options, stage)
        datamodule = getattr(self._trainer, "datamodule", None)
        overrides = getattr(datamodule, "shard_options", None)
        return options.replace(**overrides(stage)) if callable(overrides) else options

    def _predict_split_batches(self) -> bool:
        return self.options_for("predict").split_batches

    # -- hooks --------------------------------------------------------------------------------------
    def connect(self, trainer: pl.Trainer) -> None:
        """Take over ``trainer``'s loaders (unless ``use_distributed_sampler=False``) and add the callbacks."""
        if trainer is not self._trainer:
            # NOTE: read before we turn it off: `Trainer(use_distributed_sampler=False)` means "leave my
            # loaders alone", as it does for Lightning's own strategies.
            self.loaders_left_alone = not sampler_injection_enabled(trainer)
            self._trainer = trainer
        disable_sampler_injection(trainer)
        add_callbacks_before_checkpoints(trainer, self.callbacks)

    def process_dataloader(self, dataloader: object) -> object:
        """``dataloader`` sharded with the options of the running stage (one already sharded is kept); a training
        iterable that is not a ``DataLoader`` is sharded if it is a recognised pipeline, else left as it is
        (its first batches compared across processes unless declared); evaluation's are left as they are."""
        if self.loaders_left_alone:
            return dataloader
        trainer, topology, device = self.trainer, self.topology, self._strategy.root_device
        stage = stage_key(trainer.state.stage)
        if stage == "train" and not is_data_loader(dataloader):
            found = classify_iterable(dataloader, topology)
            if isinstance(found, LeftAsItIs):
                self.left_as_it_is[found.name] = found
                return checked(dataloader, found, topology.num_processes) if found.checked else dataloader
        options = self.options_for(stage)
        if stage != "train":
            if is_shard_loader(dataloader) or not is_data_loader(dataloader):
                return dataloader
            prepared = prepare_for_stage(dataloader, options, topology, stage, device)
            if is_shard_loader(prepared):
                prepared.resume_hook = EvaluationResumeHook()
            return prepared
        position = len(self._rounds.current)
        if is_shard_loader(dataloader):
            # NOTE: a loader of ours that a reload hands back, put in the trainer's epoch before Lightning
            # measures it (still in a resumed epoch, it would count that epoch's steps taken plus steps left).
            self._rounds.current.append(dataloader)  # NOTE: it goes on with its own random stream.
            self.epoch_callback.align(trainer, dataloader)
            loader: DataLoader = dataloader
        else:
            # NOTE: a `DataLoader` or a recognised pipeline (which `prepare_for_stage` takes too), built in
            # the current round, in the trainer's epoch, with the hook that tells it what Lightning consumed
            # (and, with `audit=True`, the audit watching it).
            with self._rounds.building():
                loader = prepare_for_stage(cast(DataLoader, dataloader), options, topology, "train", device)
            self._rounds.add(loader)
            if is_shard_loader(loader):
                loader.set_epoch(trainer.current_epoch)
                reload_next_epoch = functools.partial(self.epoch_callback.reload_next_epoch, trainer)
                loader.resume_hook = LightningResumeHook(trainer, loader, resharded=reload_next_epoch)
                if self.strategy_options.audit:
                    self.audit.watch(loader, records=self._strategy.global_rank in topology.leaders)
        if is_shard_loader(loader):
            resumed = _load_early(loader, checkpoint_loader_states(trainer), position, options.data_seed)
            self._resumed_batches = resumed if position == 0 else self._resumed_batches
        # NOTE: after the checkpoint's state is loaded: the rest of an epoch resumed on another number of
        # processes can split unevenly even when the whole epoch does not.
        check_even_training(loader, options, topology)
        return loader

    def stepping(self, optimizer: Optimizer, precision_plugin: object) -> AbstractContextManager[Any]:
        """A context for one optimizer step: a ``ShardOptimizer`` under AMP learns whether the step was skipped."""
        scaler = getattr(precision_plugin, "scaler", None)
        if isinstance(optimizer, ShardOptimizer) and isinstance(scaler, torch.amp.GradScaler):
            return optimizer.watch_scaler(scaler)
        return nullcontext()

    def batch_moving(self, dataloader_idx: int) -> None:
        """A batch of loader ``dataloader_idx`` is about to be processed (moved to the device)."""
        self._dataloader_idx = dataloader_idx
        # NOTE: once per consumed batch, after Lightning's read-ahead (see `gather_stream_for_metrics`).
        loader = self.current_loader()
        self._stream_padding = 0 if loader is None or loader.stream is None else loader.stream.take_padding()

    def on_train_start(self, configs: list[LRSchedulerConfig]) -> None:
        """Log the plan of the fit and warn about step schedules that end early."""
        trainer = self.trainer
        if self.loaders_left_alone:
            info("lightning_shard: loaders left as they are (`Trainer(use_distributed_sampler=False)`).")
        loaders = [loader for loader in flatten_loaders(trainer.train_dataloader) if is_shard_loader(loader)]
        left = tuple(found.describe() for found in self.left_as_it_is.values())
        if not loaders:
            if left:
                info(left_alone_plan(self.topology.num_processes, left))
            return
        short = short_schedulers(trainer, configs, self.scheduler_scaling)
        self.shard_plan = plan_for(
            loaders[0],
            self.scheduler_scaling,
            num_training_batches=trainer.num_training_batches,
            accumulate_grad_batches=trainer.accumulate_grad_batches,
            short_schedulers=short,
            step_schedulers=has_step_schedulers(configs),
            ranks=None if self.topology.rank_indices is None else len(self.topology.rank_indices),
            resumed_batches=self._resumed_batches,
            left_as_it_is=left,
        )
        info(str(self.shard_plan))
        warn_short_schedulers(short)

    @contextmanager
    def in_step(self) -> Iterator[None]:
        """Mark a step as running: ``gather_for_metrics`` then knows the padding of the current batch."""
        self._stepping = True
        try:
            yield
        finally:
            self._stepping = False

    # -- exact evaluation ---------------------------------------------------------------------------
    def gather_for_metrics(self, data: Any) -> Any:
        loader, topology = self.current_loader(), self.topology
        if loader is not None and topology.num_processes > 1 and not loader.sharding.even_batches:
            raise ValueError(
                "`gather_for_metrics` needs every process to run as many steps, but the current loader has "
                "`even_batches=False`, so a process could wait for the others forever. Use `even_batches=True` "
                'or `"balanced"` (the default for validation and test); the padding is dropped when gathering.'
            )
        padded = loader is not None and loader.pads_last_step
        if padded and not self._stepping:
            raise ValueError(
                "`gather_for_metrics` was called outside a training / validation / test step, with a loader "
                "that pads its last step with repeated samples (`even_batches=True`), so the padding can no "
                "longer be told apart. Call it in the step with that step's outputs, or prepare the loader "
                'with `even_batches="balanced"` (no repeated samples; the default for validation and test).'
            )
        sources = None if topology.rank_indices is None else topology.leaders
        if loader is not None and loader.stream is not None and loader.stream.uneven:
            return gather_stream_for_metrics(data, self._stream_padding, sources)
        gathered = gather_in_process_order(data, sources)
        if loader is None or not padded or not loader.end_of_dataloader:
            return gathered
        return keep_rows(gathered, slice(0, loader.remainder))

    def current_loader(self) -> ShardLoader | None:
        loaders = running_loaders(self.trainer)
        loader = loaders[self._dataloader_idx] if self._dataloader_idx < len(loaders) else None
        return loader if is_shard_loader(loader) else None


def gather_stream_for_metrics(data: Any, padding: int, sources: Sequence[int] | None = None) -> Any:
    """``data`` of every process in process order, without the parts of processes whose batch was padding.

    Every process must call it (two all-gathers: row counts and padding, then ``data``). A stream whose
    shares end unevenly pads whole batches on some processes for several steps, so each batch's padding
    comes from the loader's queue, not from ``remainder`` (docs/DESIGN.md, "Streaming data").
    """
    rows = _rows(data)
    counts = gather_in_process_order(
        torch.tensor([[rows, min(padding, rows)]], dtype=torch.int64, device=communication_device()), sources
    )
    gathered = gather_in_process_order(data, sources)
    if not bool(counts[:, 1].any()):
        return gathered
    # NOTE: each process's rows in process order, its last `padded` ones padding.
    real = [row < count - padded for count, padded in counts.tolist() for row in range(count)]
    keep = [index for index, is_real in enumerate(real) if is_real]
    if is_tensor_tree(gathered):
        return map_leaves(lambda tensor: tensor[keep], gathered)
    return [gathered[index] for index in keep]


def _rows(data: Any) -> int:
    """The rows ``data`` contributes to a gather (a scalar, or a non-list object, counts as one)."""
    if is_tensor_tree(data):
        return max(batch_length(data), 1)
    return len(data) if isinstance(data, (list, tuple)) else 1


def _load_early(loader: ShardLoader, states: list[Any], position: int, data_seed: int | None) -> int:
    """Load a checkpoint's state into its loader before Lightning measures it (Lightning loads it again
    after, harmlessly); return the batches of the epoch that state had consumed (0 without one)."""
    state = states[position] if position < len(states) else None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        return 0
    saved = state.get("sampler_seed")
    if data_seed is not None and saved is not None and saved != data_seed:
        warn(
            f"lightning_shard: `data_seed={data_seed}` is ignored in this fit: the checkpoint's loader state "
            f"was saved with the seed {saved}, which goes on, so the resumed fit continues the interrupted "
            "one's order exactly. To shuffle with the new seed, start a new fit (no `ckpt_path`), or pass "
            f"`data_seed={saved}` to silence this."
        )
    loader.load_state_dict(state)
    return int(state["steps"])


class LightningResumeHook:
    """A ``ResumeHook`` that reads what ``trainer``'s fit loop consumed of the training ``loader``; the loader
    calls ``resharded`` when it loads a state written by another number of processes."""

    def __init__(self, trainer: pl.Trainer, loader: ShardLoader, *, resharded: Callable[[], None]) -> None:
        self.trainer = trainer
        self.loader = loader
        self.resharded = resharded

    def consumed(self) -> Consumed:
        """The training steps taken in the epoch; the epoch is over once Lightning saw its last batch."""
        ready, last = training_batches_ready(self.trainer)
        if last:
            return Consumed(ready, epoch_finished=True, next_epoch=self.trainer.current_epoch + 1)
        loaders = flatten_loaders(self.trainer.train_dataloader)
        yielded = [loader.steps_taken for loader in loaders if is_shard_loader(loader)]
        if len(yielded) <= 1:
            return Consumed(ready)
        # NOTE: the loader that has not cycled yielded once per step fetched: its excess over the steps
        # taken is Lightning's read-ahead, the same for every loader of the combined step.
        ahead = max(yielded) - ready
        return Consumed(max(self.loader.steps_taken - ahead, 0))


class EvaluationResumeHook:
    """A ``ResumeHook`` for validation / test / predict loaders: their saved state is their epoch's start."""

    def consumed(self) -> Consumed:
        return Consumed(0)

    def resharded(self) -> None:
        """Nothing to realign: Lightning measures evaluation loaders at every run."""
