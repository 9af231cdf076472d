"""Where a loader stands in its epoch, what it shards, and what a training loop tells it it consumed.

Plain data shared by the loaders (``loaders/resumable.py``) and the code that drives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from lightning_shard.loaders.state import LoaderState
from lightning_shard.sampling.balance import EvenBatches


@dataclass(frozen=True)
class Position:
    """Where an epoch stands, or will stand once a restore recorded by ``load_state_dict`` is applied.

    ``steps`` counts the steps taken in the epoch; the first ``base_steps`` of them were taken under
    another sharding, which consumed ``base`` (batches of the user's loader, or elements of an iterable
    dataset). This process continues at its batch ``start`` of the current sharding of what is left.
    """

    epoch: int | None
    steps: int = 0
    base: int = 0
    base_steps: int = 0
    generator_state: str | None = None
    sampler_seed: int | None = None
    workers: int | None = None
    """The ``DataLoader`` workers this epoch is read with when not the loader's own: a stream's epoch
    resumed under another ``num_workers`` finishes under the count it started with."""

    @property
    def start(self) -> int:
        """This process's batch number in the shard of what was left after ``base``."""
        return self.steps - self.base_steps


@dataclass(frozen=True)
class ShardingInfo:
    """The sharding a loader applies, as recorded in and checked against saved state."""

    mode: str
    num_processes: int
    split_batches: bool
    even_batches: EvenBatches
    drop_last: bool
    batch_size: int | None
    dataset_length: int | None
    step_size: int
    """Units of ``base`` consumed per step by all processes together."""
    sampler: str
    """The kind of index source: the index sampler's class name, or ``"iterable"``."""


@dataclass(frozen=True)
class Consumed:
    """How far the code iterating a loader really got in the current epoch."""

    steps: int
    """Steps consumed in the epoch (the loader may have yielded more: a read-ahead)."""
    epoch_finished: bool = False
    """Whether the consumer is done with the epoch; the state then starts the next epoch."""
    next_epoch: int | None = None
    """With ``epoch_finished``: the epoch that follows (default: the loader's epoch plus one)."""


@runtime_checkable
class ResumeHook(Protocol):
    """What a training loop tells its loader, set as ``loader.resume_hook``.

    Lightning reads batches ahead of its training step and stops an epoch after ``len(loader)`` batches
    without exhausting the loader, so what the loader *yielded* is not what training *consumed*; and
    Lightning keeps its own step counter beside the loader's state. The Lightning adapter sets one of
    these on every training loader it prepares (``lightning_shard.lightning.checkpoints``).
    """

    def consumed(self) -> Consumed | None:
        """What the consumer took of the current epoch; ``None`` when the loader's own count is right."""
        ...

    def resharded(self, saved: LoaderState) -> None:
        """Called after ``load_state_dict`` loaded ``saved``, written by another number of processes."""
        ...


class Progress:
    """Batches yielded in this epoch and whether the last one was, updated at every batch.

    NOTE: a plain slotted object, because every attribute set on a ``DataLoader`` goes through its
    Python-level ``__setattr__`` (about 0.6 us, twice per batch otherwise).
    """

    __slots__ = ("steps", "end")

    def __init__(self) -> None:
        self.steps = 0
        self.end = False
