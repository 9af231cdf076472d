"""What both loaders share: epochs, per-loader iteration state, resumption, and the hook a training loop
sets to say what it really consumed.

All iteration state lives on the loader instance (docs/DESIGN.md, "No singleton"): ``end_of_dataloader``,
``remainder`` and the position in the epoch. ``state_dict`` describes the epoch globally ("Global
state"), so it is the same on every process and loads on any number of processes ("Elastic resume").
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_shard.comm.collectives import is_distributed, world_size
from lightning_shard.loaders.cursor import EpochCursor
from lightning_shard.loaders.position import Position, Progress, ResumeHook, ShardingInfo
from lightning_shard.loaders.settings import (
    NATIVE_STREAM_KINDS,
    STREAM_KINDS,
    STRIDED_STREAM,
    loader_settings,
)
from lightning_shard.loaders.state import LoaderState, decode_generator_state, encode_generator_state
from lightning_shard.sampling.balance import is_balanced
from lightning_shard.sampling.epochs import forward_epoch
from lightning_shard.sampling.samplers import SeedableRandomSampler


class ResumableLoaderMixin:
    """Epoch, position and state handling shared by ``DataLoaderShard`` and ``DataLoaderDispatcher``."""

    remainder: int
    resume_hook: ResumeHook | None
    """Set by a training loop that consumes less than the loader yielded (see ``ResumeHook``)."""
    _progress: Progress
    _base: int
    _base_steps: int
    _epoch: int
    _pending: Position | None
    _epoch_generator_state: str | None
    _in_epoch: bool
    _epoch_workers: int | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """``cls``, or its ``StatefulDataLoader`` variant when ``use_stateful_dataloader=True`` asks for it.

        The seed's contract: ``DataLoaderShard(dataset, ..., use_stateful_dataloader=True)`` is backed by
        torchdata's ``StatefulDataLoader``. A constructor returning a subclass of its class is the pattern
        of ``pathlib.Path()`` (a ``PosixPath``); Python then runs ``__init__`` on it as usual.
        """
        if not issubclass(cls, StatefulDataLoader) and _asks_stateful(cls, args, kwargs):
            # NOTE: imported here: `variants` imports the loader modules, which import this one.
            from lightning_shard.loaders.variants import stateful_loader_class

            variant: type = stateful_loader_class(cls)  # type: ignore[arg-type]
            return super().__new__(variant)
        return super().__new__(cls)

    def _init_position(self, skip_batches: int) -> None:
        self._progress = Progress()
        self.remainder = -1
        self.resume_hook = None
        self._base = 0
        self._base_steps = 0
        self._epoch = 0
        self._pending = Position(None, steps=skip_batches) if skip_batches else None
        self._epoch_generator_state = None
        self._in_epoch = False
        self._epoch_workers = None

    # -- to be provided by the loader -------------------------------------------------------------
    def _sharding(self) -> ShardingInfo:
        raise NotImplementedError

    def _sampler_generator(self) -> torch.Generator | None:
        raise NotImplementedError

    def _user_sampler(self) -> Any:
        """The index sampler under the loader's batch sampler, if any."""
        raise NotImplementedError

    def _seek(self, start: int, base: int) -> None:
        """Make the next iteration start at this process's batch ``start`` after ``base`` was consumed."""
        raise NotImplementedError

    def _length_after(self, base: int) -> int:
        """This process's batches in an epoch of which ``base`` units were consumed before it began."""
        raise NotImplementedError

    def fresh_copy(self) -> Any:
        """A loader with every setting of this one and a position of its own (at the epoch's start)."""
        raise NotImplementedError

    def _stream_entries(self, steps: int) -> list[dict[str, Any]] | None:
        """Each process's position in its own share of a stream, for the state (``None``: not such a loader)."""
        return None

    def _restore_streams(self, saved: LoaderState, info: ShardingInfo) -> None:
        """Check and record the per-process stream positions of ``saved`` (nothing for other loaders)."""

    # -- the user's batches -----------------------------------------------------------------------
    def _own_workers(self) -> int:
        return int(getattr(self, "num_workers", 0))

    @property
    def _reading_workers(self) -> int:
        """The ``DataLoader`` workers the epoch in progress is read with."""
        return self._own_workers() if self._epoch_workers is None else self._epoch_workers

    def _user_batches(self) -> Iterator[Any]:
        """A new iterator over the user's batches of this epoch, as the ``DataLoader`` yields them.

        A stream's epoch resumed under another ``num_workers`` is read, to its end, by a one-epoch
        ``DataLoader`` with the worker count it started with (``_stream_epoch_workers``).
        """
        workers = self._epoch_workers
        if workers is None or workers == self._own_workers():
            return super().__iter__()  # type: ignore[misc]
        loader: Any = self
        settings = dict(loader_settings(loader), num_workers=workers, persistent_workers=False)
        if workers == 0:
            settings.update(prefetch_factor=None, multiprocessing_context=None)
        return iter(
            DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, **settings)
        )

    # -- what the loader is -----------------------------------------------------------------------
    @property
    def sharding(self) -> ShardingInfo:
        """The sharding this loader applies (mode, processes, batch size, flags, dataset length)."""
        return self._sharding()

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

    @property
    def end_of_dataloader(self) -> bool:
        """Whether the batch just yielded is the last of the epoch."""
        return self._progress.end

    @end_of_dataloader.setter
    def end_of_dataloader(self, value: bool) -> None:
        self._progress.end = value

    @property
    def _steps(self) -> int:
        """Steps taken in the current epoch (counting any skipped or taken before a restore)."""
        return self._progress.steps

    @_steps.setter
    def _steps(self, value: int) -> None:
        self._progress.steps = value

    @property
    def steps_taken(self) -> int:
        """Batches yielded in the epoch in progress, counting those skipped or taken before a restore."""
        return self._progress.steps if self._in_epoch else 0

    def __len__(self) -> int:
        """Steps of the epoch in progress (or the next), counting those taken before a resume."""
        pending = self._pending
        if pending is not None:
            return pending.base_steps + self._length_after(pending.base)
        if self._in_epoch:
            return self._base_steps + self._length_after(self._base)
        return self._length_after(0)

    # -- epochs -----------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration covers."""
        return self._epoch

    @property
    def iteration(self) -> int:
        """The epoch counter under the reference's name (``epoch``), for code written against it."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch``; it reaches the sampler, the batch sampler and every wrapper in between.

        Selecting another epoch than the one being iterated abandons that one: the next ``iter()``,
        and ``state_dict()`` until then, start ``epoch`` from its beginning.
        """
        if epoch != self._epoch and self._in_epoch:
            # NOTE: e.g. Lightning stops after `len(loader)` batches, without exhausting the iterator.
            self._in_epoch = False
            self._steps, self._base, self._base_steps = 0, 0, 0
            self._epoch_workers = None
        self._epoch = epoch
        self._forward_epoch(epoch)

    # -- iteration bookkeeping --------------------------------------------------------------------
    def _begin_epoch(self) -> None:
        """Apply a pending restore (or rewind), then remember the generator state of the epoch."""
        restore, self._pending = self._pending, None
        if restore is None and self._in_epoch and self.resume_hook is None:
            # NOTE: the iteration before was left before its end (a `break`, as in a Fabric loop that trains
            # K steps an epoch): a new `iter()` starts the next epoch, as a `DataLoader`'s draws a new order.
            # A loop that tells the loader what it consumed (Lightning's, through `resume_hook`) also sets
            # its epochs, and may call `iter()` again within one (Lightning does after a reload).
            self._finish_epoch()
        self.end_of_dataloader = False
        epoch = self._epoch if restore is None or restore.epoch is None else restore.epoch
        self.set_epoch(epoch)
        if restore is not None:
            self._restore_randomness(restore)
        self._epoch_generator_state = encode_generator_state(self._sampler_generator())
        self._in_epoch = True
        position = restore if restore is not None else Position(epoch)
        self._steps, self._base, self._base_steps = position.steps, position.base, position.base_steps
        self._epoch_workers = position.workers
        self._seek(position.start, position.base)
        self.remainder = self._compute_remainder()

    def _restore_randomness(self, restore: Position) -> None:
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
        self._steps, self._base, self._base_steps = 0, 0, 0
        self._in_epoch = False
        self._epoch_workers = None
        self.set_epoch(self._epoch + 1)

    def _position(self) -> Position:
        """Where the next batch comes from: a pending restore, the epoch in progress, or the next epoch.

        NOTE: between epochs (and before the first) the next epoch starts from the generator's state
        now, not from the state the finished epoch started with.
        """
        pending, seed = self._pending, self._sampler_seed()
        if pending is not None:
            epoch = self._epoch if pending.epoch is None else pending.epoch
            state = pending.generator_state or encode_generator_state(self._sampler_generator())
            return replace(
                pending, epoch=epoch, generator_state=state, sampler_seed=pending.sampler_seed or seed
            )
        if self._in_epoch:
            return Position(
                self._epoch,
                self._steps,
                self._base,
                self._base_steps,
                self._epoch_generator_state,
                seed,
                self._epoch_workers,
            )
        return Position(
            self._epoch, generator_state=encode_generator_state(self._sampler_generator()), sampler_seed=seed
        )

    def _compute_remainder(self) -> int:
        """Real samples of the last (padded) global batch, or -1 when no batch is padded or it is unknown."""
        info = self._sharding()
        if info.drop_last or info.dataset_length is None or not self.total_batch_size:
            return -1
        if info.mode == "shard" and is_balanced(info.even_batches, info.dataset_length, info.num_processes):
            return -1
        return info.dataset_length % self.total_batch_size

    @property
    def pads_last_step(self) -> bool:
        """Whether the epoch's last step repeats samples to fill every process's batch."""
        info = self._sharding()
        if self.remainder <= 0 or info.num_processes == 1 or not info.even_batches:
            return False
        return info.mode == "shard" or self.remainder % info.num_processes != 0

    @property
    def total_batch_size(self) -> int:
        """Samples per step across all processes (``B * N``, or ``B`` with ``split_batches``; 0 unknown)."""
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
            steps: steps consumed in this epoch, when the caller reads ahead of what it consumed;
                defaults to what the ``resume_hook`` reports, else to the batches this loader yielded.

        Raises:
            ValueError: if ``steps`` is below the steps taken before this run resumed the epoch.
        """
        hook = self.resume_hook
        consumed = hook.consumed() if steps is None and hook is not None else None
        if consumed is not None and consumed.epoch_finished:
            return self._next_epoch_state(consumed.next_epoch)
        if consumed is not None:
            steps = consumed.steps
        return self._state_at(self._position(), steps).to_dict()

    def _state_at(self, position: Position, steps: int | None) -> LoaderState:
        info = self._sharding()
        steps = position.steps if steps is None else steps
        if steps < position.base_steps:
            raise ValueError(
                f"`steps={steps}` is below the {position.base_steps} steps this epoch took before it was "
                "resumed on this number of processes. Pass the steps consumed in the whole epoch."
            )
        return LoaderState(
            mode=info.mode,
            epoch=position.epoch or 0,
            steps=steps,
            base=position.base,
            consumed=position.base + (steps - position.base_steps) * info.step_size,
            num_processes=info.num_processes,
            split_batches=info.split_batches,
            even_batches=info.even_batches,
            drop_last=info.drop_last,
            batch_size=info.batch_size,
            dataset_length=info.dataset_length,
            generator_state=position.generator_state,
            sampler_seed=position.sampler_seed,
            base_steps=position.base_steps,
            world_size=world_size() if is_distributed() else None,
            num_workers=self._own_workers() if position.workers is None else position.workers,
            sampler=info.sampler,
            streams=self._stream_entries(steps),
        )

    def _next_epoch_state(self, epoch: int | None = None) -> dict[str, Any]:
        """The state at the start of the epoch after the current one (or ``epoch``), from the generator as
        it is now."""
        # NOTE: an uninterrupted run starts the next epoch from the generator as the last one left it. A
        # loader whose iterator ran to its end has already moved on to the next epoch.
        if epoch is None:
            epoch = self._epoch + 1 if self._in_epoch else self._epoch
        following = Position(
            epoch,
            generator_state=encode_generator_state(self._sampler_generator()),
            sampler_seed=self._sampler_seed(),
        )
        return self._state_at(following, 0).to_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue, at the next ``iter()``, exactly where the run that saved ``state_dict`` stopped.

        State saved by another number of processes continues with every sample that run did not
        consume, sharded over this one's; its steps keep counting, so ``len()`` is the steps taken
        plus the steps left.

        Raises:
            ValueError: if the state is malformed or from another version, dataset length, batch size
                or ``split_batches`` setting.
        """
        saved = LoaderState.from_dict(state_dict)
        info = self._sharding()
        _check_compatible(saved, info)
        self._restore_streams(saved, info)
        resharded = saved.num_processes != info.num_processes
        if resharded:
            _check_one_replay(saved)
        # NOTE: another number of processes continues after everything consumed, its steps counted as taken.
        base, base_steps = (saved.consumed, saved.steps) if resharded else (saved.base, saved.base_steps)
        workers = _stream_epoch_workers(saved, info, self._own_workers())
        self._pending = Position(
            saved.epoch, saved.steps, base, base_steps, saved.generator_state, saved.sampler_seed, workers
        )
        self._epoch = saved.epoch
        if resharded and self.resume_hook is not None:
            self.resume_hook.resharded(saved)


def _check_compatible(saved: LoaderState, info: ShardingInfo) -> None:
    for name, here in (
        ("mode", info.mode),
        ("dataset_length", info.dataset_length),
        ("batch_size", info.batch_size),
        ("split_batches", info.split_batches),
        ("drop_last", info.drop_last),
        ("sampler", info.sampler),
    ):
        there = getattr(saved, name)
        if there != here and not (name == "sampler" and not _sampler_matters(saved, here)):
            raise ValueError(
                f"`state_dict` was saved with `{name}={there!r}`, but this loader has `{name}={here!r}`. "
                f"Load it into a loader built the same way (same dataset, batch size, sampler and flags), "
                "or start the epoch afresh."
            )


def _check_one_replay(saved: LoaderState) -> None:
    """Refuse a second change of process count within an epoch of a stream read by workers.

    NOTE: the first change replays the epoch's order as its workers read it (``loaders/stream_replay.py``);
    the state of the replayed epoch records where that replay stands, not how a second one would continue.
    """
    if saved.sampler == STRIDED_STREAM and saved.base and saved.num_workers:
        raise ValueError(
            f"`state_dict` was saved in epoch {saved.epoch} of a stream read by {saved.num_workers} DataLoader "
            f"workers, after that epoch had already moved to another number of processes; it moves once per "
            f"epoch. Resume on {saved.num_processes} processes (as saved) to finish epoch {saved.epoch}, or "
            "resume from a checkpoint written before the first move or after the epoch."
        )


def _sampler_matters(saved: LoaderState, here: object) -> bool:
    """Whether a change of index sampler kind breaks the saved position: only in the middle of an epoch
    (the next epoch starts afresh anyway); natively sharded streams say it themselves
    (``loaders/streams.py``)."""
    if saved.sampler is None or saved.steps == 0:
        return False
    if saved.sampler in NATIVE_STREAM_KINDS or here in NATIVE_STREAM_KINDS:
        return False
    # NOTE: a dispatched stream's state recorded "none" before (CHANGELOG, "Unreleased"): the same stream.
    return {saved.sampler, here} != {STRIDED_STREAM, "none"}


def _stream_epoch_workers(saved: LoaderState, info: ShardingInfo, num_workers: int) -> int | None:
    """The worker count a stream's resumed epoch must finish under, when it is not the loader's own.

    NOTE: a stream's batches come out of its ``DataLoader`` workers interleaved, each worker reading its
    own part (split by the dataset, or by ``shard(W, w)``), so an epoch's batches and their order depend
    on the number of workers: only the count the epoch started with continues it exactly. The rest of
    the epoch is read with that count, and the loader's own applies from the next epoch (docs/DESIGN.md,
    "Elastic resume"). A map-style loader's position is indices, which any number of workers fetches alike.
    """
    if info.sampler not in STREAM_KINDS or saved.steps == 0 or saved.num_workers == num_workers:
        return None
    if not is_distributed() or dist.get_rank() == 0:
        warnings.warn(
            f"lightning_shard: the stream state was saved in epoch {saved.epoch} at step {saved.steps} with "
            f"`num_workers={saved.num_workers}`; this loader has `num_workers={num_workers}`. The rest of epoch "
            f"{saved.epoch} is read with {saved.num_workers} workers (a stream's batches and their order depend on "
            f"the number of workers, so only that count continues the epoch exactly); `num_workers={num_workers}` "
            "applies from the next epoch.",
            WorkerCountWarning,
            stacklevel=3,
        )
    return saved.num_workers


class WorkerCountWarning(UserWarning):
    """A stream's epoch resumed under another ``num_workers`` finishes with the count it was saved with."""


def _asks_stateful(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a constructor call of ``cls`` passes ``use_stateful_dataloader=True`` (by name or position)."""
    if "use_stateful_dataloader" in kwargs:
        return bool(kwargs["use_stateful_dataloader"])
    index = _stateful_argument_index(cls)
    return index is not None and index < len(args) and bool(args[index])


@functools.cache
def _stateful_argument_index(cls: type) -> int | None:
    init: Any = cls.__init__  # type: ignore[misc]
    parameters = list(inspect.signature(init).parameters.values())[1:]  # NOTE: without `self`
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names.index("use_stateful_dataloader") if "use_stateful_dataloader" in names else None
