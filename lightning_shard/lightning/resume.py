"""Exact mid-epoch resumption through Lightning's checkpoints.

Lightning checkpoints a resumable training loader itself: ``FitLoop.on_save_checkpoint`` stores the
loader's ``state_dict()`` (rank 0's; ours is the same on every rank) and, on ``fit(ckpt_path=...)``,
``load_state_dict`` is called on the new loader right before its first ``iter()``. Two things need the
adapter:

- Lightning fetches one batch ahead of the training step for loaders without a length, and never
  exhausts a loader with one, so what the loader has *yielded* is not what training *consumed*. The
  saved position is the number of batches the training steps took (the epoch loop's batch progress),
  and a finished epoch is saved as the start of the next one.
- Lightning restores its own batch counter, then stops the epoch when that counter reaches the
  loader's length. A checkpoint from ``N`` processes loaded on ``M < N`` is therefore restored as "the
  same number of steps, after the batches that the ``N`` processes consumed on top of them", so the
  counter and the loader agree (SPEC D5). Lightning keeps that epoch's length for the following
  epochs, so the loaders are reloaded once at the next epoch (``ShardEpochCallback.reload_next_epoch``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import lightning.pytorch as pl

from lightning_shard.lightning.loaders import ShardLoader, flatten_loaders
from lightning_shard.state import LoaderState, encode_generator_state


def bind_lightning_state(loader: ShardLoader, trainer: pl.Trainer, on_realigned: Callable[[], None]) -> None:
    """Make ``loader.state_dict()`` / ``load_state_dict()`` what Lightning's checkpoints need (above).

    ``on_realigned`` is called when a state saved by another number of processes is loaded.
    """
    # NOTE: Lightning calls `state_dict()` without arguments, so the position it must save is bound to this
    # loader instance; `state_dict(steps=...)` still gives the loader's own answer.
    setattr(loader, "state_dict", _ConsumedState(loader, trainer))  # noqa: B010 - shadows the method
    setattr(loader, "load_state_dict", _AlignedLoad(loader, on_realigned))  # noqa: B010


class _ConsumedState:
    """``state_dict()``: the loader's position after the batches the training steps consumed."""

    def __init__(self, loader: ShardLoader, trainer: pl.Trainer) -> None:
        self.loader = loader
        self.trainer = trainer

    def __call__(self, steps: int | None = None) -> dict[str, Any]:
        if steps is not None:
            return _own_state(self.loader, steps)
        progress = self.trainer.fit_loop.epoch_loop.batch_progress
        if progress.is_last_batch:
            return next_epoch_state(self.loader, self.trainer.current_epoch + 1)
        if len(flatten_loaders(self.trainer.train_dataloader)) > 1:
            # NOTE: with several training loaders Lightning's batch count is not this loader's (a shorter
            # one cycles); it reads no batch ahead of a loader with a length, so what it yielded is exact.
            return type(self.loader).state_dict(self.loader)
        return _own_state(self.loader, progress.current.ready)


class _AlignedLoad:
    """``load_state_dict(state)``: the loader's own, after aligning state from another process count."""

    def __init__(self, loader: ShardLoader, on_realigned: Callable[[], None]) -> None:
        self.loader = loader
        self.on_realigned = on_realigned

    def __call__(self, state_dict: dict[str, Any]) -> None:
        aligned = aligned_state(self.loader, state_dict)
        type(self.loader).load_state_dict(self.loader, aligned)
        if aligned is not state_dict:
            self.on_realigned()


def _own_state(loader: ShardLoader, steps: int) -> dict[str, Any]:
    return type(loader).state_dict(loader, steps)


def next_epoch_state(loader: ShardLoader, epoch: int) -> dict[str, Any]:
    """The state of ``loader`` at the start of ``epoch``, which follows the one it is iterating."""
    state = LoaderState.from_dict(_own_state(loader, 0))
    generator = sampler_generator(loader)
    # NOTE: an uninterrupted run starts the next epoch from the generator as the last one left it.
    following = replace(
        state, epoch=epoch, steps=0, base=0, consumed=0, generator_state=encode_generator_state(generator)
    )
    return following.to_dict()


def sampler_generator(loader: ShardLoader) -> Any:
    """The generator that orders ``loader``'s samples (``None`` for a sequential or unseeded order)."""
    generator = getattr(loader, "synchronized_generator", None)
    if generator is not None:
        return generator
    return getattr(getattr(loader.cursor, "sampler", None), "generator", None)


def aligned_state(loader: ShardLoader, state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` as this loader's process count would have saved it after as many steps.

    Raises:
        ValueError: if the state is from fewer processes and mid-epoch (the steps taken would cover
            more data than was consumed).
    """
    saved = LoaderState.from_dict(state_dict)
    here = LoaderState.from_dict(_own_state(loader, 0))
    if saved.num_processes == here.num_processes:
        return state_dict
    step_size = LoaderState.from_dict(_own_state(loader, 1)).consumed - here.consumed
    base = saved.consumed - saved.steps * step_size
    if base < 0:
        raise ValueError(
            f"The checkpoint was written mid-epoch by {saved.num_processes} process(es) after {saved.steps} "
            f"steps; {here.num_processes} processes would have consumed more data in as many steps, so "
            "Lightning's step count could not match the data. Resume on at most "
            f"{saved.num_processes} process(es), or from a checkpoint written at the end of an epoch."
        )
    aligned = replace(saved, num_processes=here.num_processes, even_batches=here.even_batches, base=base)
    return aligned.to_dict()
