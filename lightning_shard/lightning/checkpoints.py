"""Exact mid-epoch resumption through Lightning's checkpoints: the ``ResumeHook``s Lightning needs.

Lightning checkpoints a resumable loader itself: the fit loop stores each training loader's
``state_dict()`` (rank 0's; ours is the same on every rank), the evaluation loops their loaders', and on
``fit(ckpt_path=...)`` ``load_state_dict`` is called on the new loaders before Lightning measures their
length and iterates them. The core loader's ``resume_hook`` is where the adapter says what that state must
be (docs/DESIGN.md, "Global state"):

- Training: Lightning fetches ahead of the training step and never exhausts a loader with a length, so
  what a loader *yielded* is not what training *consumed*. The saved position is what the training steps
  took, and a finished epoch is saved as the start of the next one. With several training loaders
  (``CombinedLoader``), each is fetched once per step (a shorter one cycles in ``"max_size_cycle"``
  mode): its consumed batches are what it yielded less what Lightning read ahead, which is the same for
  all of them.
- A state from another number of processes keeps its step count (the core's ``base_steps``), so
  Lightning's restored batch counter and the loader's length agree; Lightning keeps that epoch's length
  for the following epochs, so the loaders are measured again at the next epoch
  (``ShardEpochCallback.reload_next_epoch``).
- Evaluation: a checkpoint written while validation runs inside a training epoch must not make the
  first validation after the resume skip what was validated before; evaluation loaders always save the
  start of their epoch.
"""

from __future__ import annotations

from collections.abc import Callable

import lightning.pytorch as pl

from lightning_shard.lightning._private import training_batches_ready
from lightning_shard.lightning.stages import ShardLoader, flatten_loaders, is_shard_loader
from lightning_shard.loaders.position import Consumed
from lightning_shard.loaders.state import LoaderState


class LightningResumeHook:
    """A ``ResumeHook`` that reads what Lightning's fit loop consumed of a training loader.

    Args:
        trainer: the trainer whose fit loop consumes the loader.
        loader: the training loader this hook is set on.
        on_resharded: called when a state written by another number of processes is loaded.
    """

    def __init__(self, trainer: pl.Trainer, loader: ShardLoader, on_resharded: Callable[[], None]) -> None:
        self.trainer = trainer
        self.loader = loader
        self.on_resharded = on_resharded

    def consumed(self) -> Consumed:
        """The training steps taken in the epoch; the epoch is over once Lightning saw its last batch."""
        ready, last = training_batches_ready(self.trainer)
        if last:
            return Consumed(ready, epoch_finished=True, next_epoch=self.trainer.current_epoch + 1)
        loaders = [
            loader for loader in flatten_loaders(self.trainer.train_dataloader) if is_shard_loader(loader)
        ]
        if len(loaders) <= 1:
            return Consumed(ready)
        # NOTE: the loader that has not cycled yielded once per step fetched: its excess over the steps
        # taken is Lightning's read-ahead, the same for every loader of the combined step.
        ahead = max(loader.steps_taken for loader in loaders) - ready
        return Consumed(max(self.loader.steps_taken - ahead, 0))

    def resharded(self, saved: LoaderState) -> None:
        """Have Lightning measure the loaders again at the next epoch (the resumed one counts differently)."""
        self.on_resharded()


class EvaluationResumeHook:
    """A ``ResumeHook`` for validation / test / predict loaders: their saved state is their epoch's start."""

    def consumed(self) -> Consumed:
        return Consumed(0)

    def resharded(self, saved: LoaderState) -> None:
        """Nothing to realign: Lightning measures evaluation loaders at every run."""
