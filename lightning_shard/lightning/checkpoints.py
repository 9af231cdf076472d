"""Exact mid-epoch resumption through Lightning's checkpoints: the ``ResumeHook`` Lightning needs.

Lightning checkpoints a resumable training loader itself: ``FitLoop.on_save_checkpoint`` stores the
loader's ``state_dict()`` (rank 0's; ours is the same on every rank) and, on ``fit(ckpt_path=...)``,
``load_state_dict`` is called on the new loader before Lightning measures its length and iterates it.
Two things need the adapter, and the core loader's ``resume_hook`` is where they go:

- Lightning fetches ahead of the training step, and never exhausts a loader with a length, so what the
  loader *yielded* is not what training *consumed*. The saved position is the number of batches the
  training steps took (the epoch loop's batch progress), and a finished epoch is saved as the start of
  the next one.
- Lightning restores its own batch counter and stops the epoch when it reaches the loader's length. The
  core keeps counting the steps of a state saved by another number of processes, so the two agree; but
  Lightning keeps that epoch's length for the following epochs, so the loaders are reloaded once at
  the next epoch (``ShardEpochCallback.reload_next_epoch``).
"""

from __future__ import annotations

from collections.abc import Callable

import lightning.pytorch as pl

from lightning_shard.lightning.stages import flatten_loaders
from lightning_shard.loaders.resumable import Consumed
from lightning_shard.loaders.state import LoaderState


class LightningResumeHook:
    """A ``ResumeHook`` that reads what Lightning's fit loop consumed of a training loader.

    Args:
        trainer: the trainer whose fit loop consumes the loader.
        on_resharded: called when a state written by another number of processes is loaded.
    """

    def __init__(self, trainer: pl.Trainer, on_resharded: Callable[[], None]) -> None:
        self.trainer = trainer
        self.on_resharded = on_resharded

    def consumed(self) -> Consumed | None:
        """The training steps taken in the epoch; the epoch is over once Lightning saw its last batch."""
        progress = self.trainer.fit_loop.epoch_loop.batch_progress
        if progress.is_last_batch:
            return Consumed(progress.current.ready, epoch_finished=True)
        if len(flatten_loaders(self.trainer.train_dataloader)) > 1:
            # NOTE: with several training loaders Lightning's batch count is not this loader's (a shorter
            # one cycles); it reads no batch ahead of a loader with a length, so what it yielded is exact.
            return None
        return Consumed(progress.current.ready)

    def resharded(self, saved: LoaderState) -> None:
        """Have Lightning measure the loaders again at the next epoch (the resumed one counts differently)."""
        self.on_resharded()
