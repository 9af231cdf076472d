"""The callbacks a ``Shard*`` strategy adds to its trainer: ``ShardEpochCallback`` keeps the training
loaders' epoch in step and reports each epoch of a stream; ``ShardRandomStatesCallback`` saves and
restores each process's random states (docs/DESIGN.md, "Streaming data", "Random states on resume"); the
audit's is in ``lightning/audit_callback.py``. And the rounds
of training loaders the epoch callback closes: continuous randomness when Lightning rebuilds the training
loaders (a reload, or a second ``fit``), the loader built at position ``p`` of a round taking over the
generator of the loader at ``p`` in the round before (docs/DESIGN.md, "Epoch purity").
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lightning_shard.comm.random_states import own_part, own_state, restore, resume_notice
from lightning_shard.lightning._private import (
    finish_restored_epoch,
    rebuild_unrestored_training_loaders,
    reload_every_n_epochs,
    set_reload_every_n_epochs,
)
from lightning_shard.lightning.random_state_files import KEY
from lightning_shard.lightning.stages import ShardLoader, flatten_loaders, is_shard_loader
from lightning_shard.loaders.state import decode_generator_state
from lightning_shard.loaders.streams import StreamReport
from lightning_shard.log import info


class TrainingLoaderRounds:
    """The training loaders of the current round (being built) and of the round before, in build order."""

    def __init__(self) -> None:
        self.current: list[Any] = []
        self.previous: list[Any] = []

    def predecessor(self) -> ShardLoader | None:
        """The loader of the round before at the position the next one will take, if any."""
        position = len(self.current)
        earlier = self.previous[position] if position < len(self.previous) else None
        return earlier if is_shard_loader(earlier) else None

    def building(self) -> AbstractContextManager[Any]:
        """Build the next loader without drawing from the global RNG when it will take over a generator."""
        return torch.random.fork_rng(devices=[]) if self.predecessor() is not None else nullcontext()

    def add(self, loader: Any) -> None:
        """Record ``loader`` (built at the next position); it continues its predecessor's random stream."""
        earlier = self.predecessor()
        if is_shard_loader(loader) and earlier is not None:
            _continue_stream(earlier, loader)
        self.current.append(loader)

    def close(self) -> None:
        """The round is complete (a fit or an epoch starts): the next built loaders follow on from it."""
        if self.current:
            self.previous, self.current = self.current, []


def _continue_stream(earlier: ShardLoader, loader: ShardLoader) -> None:
    # NOTE: a loader whose checkpoint state waits for its next `iter()` goes on from that state, not from its
    # generator and seed as they are before it is applied.
    pending = earlier.pending_position
    source, target = earlier.resumption.source.generator(), loader.resumption.source.generator()
    if target is not None and source is not target:
        if pending is not None and pending.generator_state is not None:
            target.set_state(decode_generator_state(pending.generator_state))
        elif source is not None:
            target.set_state(source.get_state())
    # NOTE: a seedable sampler's order is (seed, epoch): its seed goes on too, as restored from a checkpoint
    # (the default seed is the process's `torch.initial_seed()`, another one in a resumed run).
    seed = pending.sampler_seed if pending is not None else None
    seed = seed if seed is not None else earlier.resumption.sampler_seed()
    seeded = loader.resumption.source.seeded()
    if seeded is not None and seed is not None:
        seeded.initial_seed = seed


class ShardEpochCallback(Callback):
    """Sets each sharded training loader's epoch to the trainer's at the start of every epoch (Lightning
    stops an epoch without exhausting the loader, which never sees its epoch end)."""

    def __init__(self) -> None:
        self._reload_setting: int | None = None
        self.rounds = TrainingLoaderRounds()
        """The training loaders whose round it closes as each fit and epoch starts (the strategy adds them)."""
        self.stream_reports: list[StreamReport] = []
        """Each finished training epoch's ``StreamReport`` (loaders over a stream that may end unevenly)."""

    def reload_next_epoch(self, trainer: pl.Trainer) -> None:
        """Have Lightning rebuild the loaders (and measure their length) at the next epoch, once."""
        # NOTE: after an elastic resume Lightning measured the epoch as "steps taken + steps left"; it keeps
        # that length until the loaders are reloaded, which `reload_dataloaders_every_n_epochs` asks for.
        if self._reload_setting is None:
            self._reload_setting = reload_every_n_epochs(trainer)
        set_reload_every_n_epochs(trainer, 1)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # NOTE: a fit resumed mid-epoch skips `on_train_epoch_start` for that epoch; this one always runs.
        self.rounds.close()
        # NOTE: after the round closed, so that a rebuilt loader takes its predecessor's place (position 0);
        # the rebuilt round is closed in turn: a reload before the next `on_train_epoch_start` (the epoch
        # after a resumed one) follows on from it.
        if rebuild_unrestored_training_loaders(trainer):
            self.rounds.close()
        finish_restored_epoch(trainer)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end_reload(trainer)
        self.rounds.close()
        for loader in flatten_loaders(trainer.train_dataloader):
            self.align(trainer, loader)

    @staticmethod
    def align(trainer: pl.Trainer, loader: object) -> None:
        """Put ``loader``, if sharded, in the trainer's epoch (an epoch Lightning stopped without exhausting
        it ends)."""
        if is_shard_loader(loader) and loader.epoch != trainer.current_epoch:
            loader.set_epoch(trainer.current_epoch)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Rank 0 logs each stream's epoch: samples read per process, padded, left unseen."""
        for loader in flatten_loaders(trainer.train_dataloader):
            report = loader.stream.report if is_shard_loader(loader) and loader.stream is not None else None
            if report is not None and report.epoch == trainer.current_epoch:
                self.stream_reports.append(report)
                info(f"lightning_shard {report.summary()}")

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end_reload(trainer)

    def _end_reload(self, trainer: pl.Trainer) -> None:
        if self._reload_setting is not None:
            set_reload_every_n_epochs(trainer, self._reload_setting)
            self._reload_setting = None


class ShardRandomStatesCallback(Callback):
    """Saves each process's random states; a resumed fit restores its own before its first step.

    NOTE: at the first ``on_train_batch_start``, after Lightning rebuilt the loaders and read ahead, so
    that nothing between the restore and the training step draws from them.
    """

    _pending: dict[str, Any] | None = None
    """The states a checkpoint restored, until the first training batch applies them."""

    @property
    @override
    def state_key(self) -> str:
        return KEY

    @override
    def state_dict(self) -> dict[str, Any]:
        return own_part()

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = own_state(state_dict)
        notice = resume_notice(state_dict)
        if notice is not None:
            info(notice)

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._pending is not None:
            restore(self._pending)
            self._pending = None
