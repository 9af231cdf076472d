"""Exact mid-epoch resumption through Lightning's checkpoints: the ``ResumeHook``s that say what a saved
loader state holds (docs/DESIGN.md, "Global state", "Elastic resume")."""

from __future__ import annotations

from collections.abc import Callable

import lightning.pytorch as pl

from lightning_shard.lightning._private import training_batches_ready
from lightning_shard.lightning.stages import ShardLoader, flatten_loaders, is_shard_loader
from lightning_shard.loaders.position import Consumed


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
