"""What both loaders share: epochs, RNG synchronisation, per-loader iteration state and resumption.

All iteration state lives on the loader instance (SPEC D2): ``end_of_dataloader``, ``remainder`` and
the position in the epoch. ``state_dict`` describes the epoch globally (SPEC D4), so it is the same on
every process and loads on any number of processes (SPEC D5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lightning_shard.cursor import EpochCursor
from lightning_shard.epochs import forward_epoch
from lightning_shard.samplers import SeedableRandomSampler
from lightning_shard.state import LoaderState, decode_generator_state, encode_generator_state


@dataclass(frozen=True)
class Restore:
    """A position recorded by ``load_state_dict``, applied by the next ``__iter__``."""

    epoch: int | None
    start: int
    base: int
    generator_state: str | None = None
    sampler_seed: int | None = None


@dataclass(frozen=True)
class ShardingInfo:
    """The sharding a loader applies, as recorded in and checked against saved state."""

    mode: str
    num_processes: int
    split_batches: bool
    even_batches: bool
    drop_last: bool
    batch_size: int | None
    dataset_length: int | None
    step_size: int
    """Units of ``base`` consumed per step by all processes together."""


class Progress:
    """Batches yielded in this epoch and whether the last one was, updated at every batch.

    NOTE: a plain slotted object, because every attribute set on a ``DataLoader`` goes through its
    Python-level ``__setattr__`` (about 0.6 us, twice per batch otherwise).
    """

    __slots__ = ("steps", "end")

    def __init__(self) -> None:
        self.steps = 0
        self.end = False


class ResumableLoaderMixin:
    """Epoch, position and state handling shared by ``DataLoaderShard`` and ``DataLoaderDispatcher``."""

    remainder: int
    _progress: Progress
    _base: int
    _epoch: int
    _pending: Restore | None
    _epoch_generator_state: str | None
    _in_epoch: bool

    def _init_position(self, skip_batches: int) -> None:
        self._progress = Progress()
        self.remainder = -1
        self._base = 0
        self._epoch = 0
        self._pending = Restore(None, skip_batches, 0) if skip_batches else None
        self._epoch_generator_state = None
        self._in_epoch = False

    # -- to be provided by the loader -------------------------------------------------------------
    def _sharding(self) -> ShardingInfo:
        raise NotImplementedError

    def _sampler_generator(self) -> torch.Generator | None:
        raise NotImplementedError

    def _user_sampler(self) -> Any:
        """The index sampler under the loader's batch sampler, if any."""
        raise NotImplementedError

    @property
    def cursor(self) -> EpochCursor | None:
        """The index source that makes map-style resumption arithmetic (``None`` for iterable data)."""
        for candidate in (getattr(self, "batch_sampler", None), getattr(self, "sampler", None)):
            if isinstance(candidate, EpochCursor):
                return candidate
        return None

    def _forward_epoch(self, epoch: int) -> None:
        """Pass ``epoch`` to the index source, or to a dataset that takes one."""
        cursor, dataset = self.cursor, getattr(self, "dataset", None)
        if cursor is not None:
            cursor.set_epoch(epoch)
        elif callable(getattr(dataset, "set_epoch", None)):
            dataset.set_epoch(epoch)  # type: ignore[union-attr]
        else:
            forward_epoch(getattr(self, "batch_sampler", None), epoch)

    def _seek(self, start: int, base: int) -> None:
        raise NotImplementedError

    @property
    def end_of_dataloader(self) -> bool:
        """Whether the batch just yielded is the last of the epoch."""
        return self._progress.end

    @end_of_dataloader.setter
    def end_of_dataloader(self, value: bool) -> None:
        self._progress.end = value

    @property
    def _steps(self) -> int:
        """Batches this loader has yielded in the current epoch (counting any skipped at its start)."""
        return self._progress.steps

    @_steps.setter
    def _steps(self, value: int) -> None:
        self._progress.steps = value

    # -- epochs -----------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration covers."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch``; it reaches the sampler, the batch sampler and every wrapper in between.

        Selecting another epoch than the one being iterated abandons that one: the next ``iter()``,
        and ``state_dict()`` until then, start ``epoch`` from its beginning.
        """
        if epoch != self._epoch and self._in_epoch:
            # NOTE: e.g. Lightning stops after `len(loader)` batches, without exhausting the iterator.
            self._in_epoch = False
            self._steps, self._base = 0, 0
        self._epoch = epoch
        self._forward_epoch(epoch)

    # -- iteration bookkeeping --------------------------------------------------------------------
    def _begin_epoch(self) -> None:
        """Apply a pending restore (or rewind), then remember the generator state of the epoch."""
        restore, self._pending = self._pending, None
        self.end_of_dataloader = False
        epoch = self._epoch if restore is None or restore.epoch is None else restore.epoch
        self.set_epoch(epoch)
        if restore is not None:
            self._restore_randomness(restore)
        self._epoch_generator_state = encode_generator_state(self._sampler_generator())
        self._in_epoch = True
        start, base = (restore.start, restore.base) if restore is not None else (0, 0)
        self._steps, self._base = start, base
        self._seek(start, base)
        self.remainder = self._compute_remainder()

    def _restore_randomness(self, restore: Restore) -> None:
        generator = self._sampler_generator()
        if restore.generator_state is not None and generator is not None:
            generator.set_state(decode_generator_state(restore.generator_state))
        sampler = self._user_sampler()
        if restore.sampler_seed is not None and isinstance(sampler, SeedableRandomSampler):
            sampler.initial_seed = restore.sampler_seed

    def _sampler_seed(self) -> int | None:
        """The seed of a ``SeedableRandomSampler`` (its order ignores the generator's state)."""
        sampler = self._user_sampler()
        return sampler.initial_seed if isinstance(sampler, SeedableRandomSampler) else None

    def _finish_epoch(self) -> None:
        self._steps, self._base = 0, 0
        self._in_epoch = False
        self.set_epoch(self._epoch + 1)

    def _position(self) -> Restore:
        """Where the next batch comes from: a pending restore, the epoch in progress, or the next epoch.

        NOTE: between epochs (and before the first) the next epoch starts from the generator's state
        now, not from the state the finished epoch started with.
        """
        pending = self._pending
        seed = self._sampler_seed()
        if pending is not None:
            epoch = self._epoch if pending.epoch is None else pending.epoch
            state = pending.generator_state or encode_generator_state(self._sampler_generator())
            return Restore(epoch, pending.start, pending.base, state, pending.sampler_seed or seed)
        if self._in_epoch:
            return Restore(self._epoch, self._steps, self._base, self._epoch_generator_state, seed)
        return Restore(self._epoch, 0, 0, encode_generator_state(self._sampler_generator()), seed)

    def _compute_remainder(self) -> int:
        info = self._sharding()
        if info.drop_last or info.dataset_length is None:
            return -1
        return info.dataset_length % self.total_batch_size

    @property
    def total_batch_size(self) -> int:
        """Samples per step across all processes (``B * N``, or ``B`` with ``split_batches``)."""
        info = self._sharding()
        batch_size = info.batch_size or 0
        return batch_size if info.split_batches else batch_size * info.num_processes

    @property
    def total_dataset_length(self) -> int | None:
        """``len`` of the user's dataset across all processes, ``None`` when it has none."""
        return self._sharding().dataset_length

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self, steps: int | None = None) -> dict[str, Any]:
        """The loader's position as plain data, the same on every process.

        Args:
            steps: batches consumed in this epoch, when the caller fetches ahead of what it consumed
                (Lightning does); defaults to the batches this loader has yielded.
        """
        info = self._sharding()
        position = self._position()
        steps = position.start if steps is None else steps
        state = LoaderState(
            mode=info.mode,
            epoch=position.epoch or 0,
            steps=steps,
            base=position.base,
            consumed=position.base + steps * info.step_size,
            num_processes=info.num_processes,
            split_batches=info.split_batches,
            even_batches=info.even_batches,
            drop_last=info.drop_last,
            batch_size=info.batch_size,
            dataset_length=info.dataset_length,
            generator_state=position.generator_state,
            sampler_seed=position.sampler_seed,
        )
        return state.to_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue, at the next ``iter()``, exactly where the run that saved ``state_dict`` stopped.

        Raises:
            ValueError: if the state is malformed or from another version, dataset length, batch size
                or ``split_batches`` setting.
        """
        saved = LoaderState.from_dict(state_dict)
        info = self._sharding()
        _check_compatible(saved, info)
        randomness = (saved.generator_state, saved.sampler_seed)
        if saved.num_processes == info.num_processes:
            self._pending = Restore(saved.epoch, saved.steps, saved.base, *randomness)
        else:
            self._pending = Restore(saved.epoch, 0, saved.consumed, *randomness)
        self._epoch = saved.epoch


def _check_compatible(saved: LoaderState, info: ShardingInfo) -> None:
    for name, here in (
        ("mode", info.mode),
        ("dataset_length", info.dataset_length),
        ("batch_size", info.batch_size),
        ("split_batches", info.split_batches),
        ("drop_last", info.drop_last),
    ):
        there = getattr(saved, name)
        if there != here:
            raise ValueError(
                f"`state_dict` was saved with `{name}={there!r}`, but this loader has `{name}={here!r}`. "
                f"Load it into a loader built the same way (same dataset, batch size and flags), "
                "or start the epoch afresh."
            )
