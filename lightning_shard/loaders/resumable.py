"""What both loaders hold: a ``Resumption`` (epochs, the position in the epoch, the saved state and a
restore waiting for the next ``iter()``); the loaders' public methods delegate to it (``loaders/base.py``).

All iteration state lives on the loader instance (docs/DESIGN.md, "No singleton"): ``end_of_dataloader``,
``remainder`` and the position in the epoch. ``state_dict`` describes the epoch globally ("Global
state"), so it is the same on every process and loads on any number of processes ("Elastic resume").
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist

from lightning_shard.comm.collectives import is_distributed, world_size
from lightning_shard.loaders.position import Position, ResumeHook, ShardingInfo
from lightning_shard.loaders.state import (
    LoaderState,
    check_resumable,
    decode_generator_state,
    encode_generator_state,
)
from lightning_shard.log import warn
from lightning_shard.sampling.native_stream import STREAM_KINDS

if TYPE_CHECKING:
    from lightning_shard.loaders.streams import StreamRun
    from lightning_shard.sampling.self_split import SelfSplit


class IndexSource(Protocol):
    """What a ``Resumption`` asks of its loader: the ``sharding()``, the ``generator()`` of the epoch's order,
    the index ``sampler()`` (if any) and what holds a seeded order's seed (``seeded()``), its ``workers()``,
    ``set_epoch`` for its index source, ``synchronize()`` (copy process 0's random states before an epoch)
    and ``length_after(base)``: this process's batches in an epoch ``base`` units into which it began."""

    def sharding(self) -> ShardingInfo: ...
    def generator(self) -> torch.Generator | None: ...
    def sampler(self) -> Any: ...
    def workers(self) -> int: ...
    def set_epoch(self, epoch: int) -> None: ...
    def length_after(self, base: int) -> int: ...
    def seeded(self) -> Any: ...
    def synchronize(self) -> None: ...


class Resumption:
    """A loader's epochs and position: applies a restore at the next ``iter()``, and saves the position.

    Args:
        source: the loader's ``IndexSource``.
        skip_batches: steps to skip at the start of the first iteration.
        stream: the loader's ``StreamRun`` (per-process stream ends, saved and restored), if any.
        library: how a stream that splits itself does it (why its shares do not carry over, or how the
            library itself resumes a position), if it does.
    """

    def __init__(
        self,
        source: IndexSource,
        *,
        skip_batches: int = 0,
        stream: StreamRun | None = None,
        library: SelfSplit | None = None,
    ) -> None:
        self.source = source
        self.stream = stream
        self.library = library
        self.position = Position()
        """The epoch in progress (or the next), updated at every batch."""
        self.pending: Position | None = None
        """A restore (``load_state_dict``, a skip) that the next ``iter()`` applies."""
        self.resume_hook: ResumeHook | None = None
        self.remainder = -1
        if skip_batches:
            self.skip(skip_batches)

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration covers."""
        return self.position.epoch or 0

    def length(self) -> int:
        """Steps of the epoch in progress (or the next), counting those taken before a resume."""
        pending, position = self.pending, self.position
        at = pending if pending is not None else position if position.in_epoch else Position()
        return at.base_steps + self.source.length_after(at.base)

    def skip(self, steps: int, epoch: int | None = None) -> None:
        """Skip ``steps`` steps of ``epoch`` (default: the epoch the next ``iter()`` covers) by index."""
        self.pending = Position(epoch, steps=steps)

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch``; selecting another one than the one being iterated abandons that one."""
        if epoch != self.position.epoch and self.position.in_epoch:
            # NOTE: e.g. Lightning stops after `len(loader)` batches, without exhausting the iterator.
            self._leave_epoch()
        self.position.epoch = epoch
        self.source.set_epoch(epoch)

    def _leave_epoch(self) -> None:
        position = self.position
        position.steps, position.base, position.base_steps = 0, 0, 0
        position.in_epoch = False
        position.workers = None

    def begin_epoch(self) -> Position:
        """Apply a pending restore (or rewind), remember the epoch's generator state; the live position."""
        self.source.synchronize()
        restore, self.pending = self.pending, None
        position = self.position
        if restore is None and position.in_epoch and self.resume_hook is None:
            # NOTE: the iteration before was left before its end (a `break`, as in a Fabric loop that trains
            # K steps an epoch): a new `iter()` starts the next epoch, as a `DataLoader`'s draws a new order.
            # A loop that tells the loader what it consumed (Lightning's, through `resume_hook`) also sets
            # its epochs, and may call `iter()` again within one (Lightning does after a reload).
            self.finish_epoch()
        elif restore is None and position.in_epoch and position.steps == 0 and position.generator_state:
            # NOTE: Lightning iterates a reloaded loader twice at the epoch's start; the first iteration's
            # workers may have drawn the order already. Nothing was consumed: begin from the epoch's start
            # again, so the order does not depend on the number of workers (harness defect 13).
            restore = Position(self.epoch, generator_state=position.generator_state)
        position.end = False
        epoch = self.epoch if restore is None or restore.epoch is None else restore.epoch
        self.set_epoch(epoch)
        if restore is not None:
            self._restore_randomness(restore)
        start = restore if restore is not None else Position(epoch)
        position.generator_state = encode_generator_state(self.source.generator())
        position.steps, position.base, position.base_steps = start.steps, start.base, start.base_steps
        position.workers, position.in_epoch = start.workers, True
        sharding = self.source.sharding()
        self.remainder = sharding.remainder(before=sharding.samples_in(start.base))
        return position

    def run(self, epoch: Generator[tuple[Any, bool], None, None]) -> Iterator[Any]:
        """Yield the batches of ``epoch`` (each with whether it is the last), counting each: the one place the
        live position moves. When ``epoch`` runs out, the epoch is finished; when the iteration is left
        early, ``epoch`` is closed (a dispatcher flushes its sends, a stream settles its agreement)."""
        position = self.position
        try:
            for batch, last in epoch:
                position.steps += 1
                position.end = last
                yield batch
        finally:
            epoch.close()
        position.end = True
        self.finish_epoch()

    def finish_epoch(self) -> None:
        """The epoch ended: the next ``iter()`` starts the one after it."""
        self._leave_epoch()
        self.set_epoch(self.epoch + 1)

    def _restore_randomness(self, restore: Position) -> None:
        generator = self.source.generator()
        if restore.generator_state is not None and generator is not None:
            generator.set_state(decode_generator_state(restore.generator_state))
        seeded = self.source.seeded()
        if restore.sampler_seed is not None and seeded is not None:
            seeded.initial_seed = restore.sampler_seed

    def sampler_seed(self) -> int | None:
        """The seed of a seeded order (``seeded_order``: it ignores the generator's state)."""
        seeded = self.source.seeded()
        return None if seeded is None else int(seeded.initial_seed)

    def snapshot(self) -> Position:
        """Where the next batch comes from: a pending restore, the epoch in progress, or the next epoch.

        NOTE: between epochs (and before the first) the next epoch starts from the generator's state
        now, not from the state the finished epoch started with.
        """
        pending, seed = self.pending, self.sampler_seed()
        if pending is not None:
            return replace(
                pending,
                epoch=self.epoch if pending.epoch is None else pending.epoch,
                generator_state=pending.generator_state or encode_generator_state(self.source.generator()),
                sampler_seed=seed if pending.sampler_seed is None else pending.sampler_seed,
            )
        return (
            replace(self.position, sampler_seed=seed) if self.position.in_epoch else self._fresh(self.epoch)
        )

    def _fresh(self, epoch: int) -> Position:
        """The start of ``epoch``, drawn from the generator as it is now."""
        return Position(
            epoch,
            generator_state=encode_generator_state(self.source.generator()),
            sampler_seed=self.sampler_seed(),
        )

    # -- state ------------------------------------------------------------------------------------
    def _hand_to_library(self, saved: LoaderState) -> bool:
        """Give a position within an epoch to a library that continues it itself; whether it was given."""
        library, at = self.library, saved.position
        if library is None or not library.resumes_itself or saved.library is None or at.steps == 0:
            return False
        library.restore(saved.library, at.epoch or 0, saved.consumed)
        return True

    def state_dict(self, steps: int | None = None) -> dict[str, Any]:
        """The position as plain data, the same on every process (see ``ResumableLoader.state_dict``)."""
        hook = self.resume_hook
        consumed = hook.consumed() if steps is None and hook is not None else None
        if consumed is not None and consumed.epoch_finished:
            # NOTE: an uninterrupted run starts the next epoch from the generator as the last one left it. A
            # loader whose iterator ran to its end has already moved on to the next epoch.
            epoch = consumed.next_epoch
            if epoch is None:
                epoch = self.epoch + 1 if self.position.in_epoch else self.epoch
            return self.state_at(self._fresh(epoch), 0).to_dict()
        if consumed is not None:
            steps = consumed.steps
        return self.state_at(self.snapshot(), steps).to_dict()

    def state_at(self, position: Position, steps: int | None) -> LoaderState:
        """The state of ``position`` once ``steps`` of its epoch are consumed (default: its own steps)."""
        info = self.source.sharding()
        steps = position.steps if steps is None else steps
        if steps < position.base_steps:
            raise ValueError(
                f"`steps={steps}` is below the {position.base_steps} steps this epoch took before it was "
                "resumed on this number of processes. Pass the steps consumed in the whole epoch."
            )
        workers = self.source.workers() if position.workers is None else position.workers
        epoch, consumed = position.epoch or 0, position.base + (steps - position.base_steps) * info.step_size
        library = self.library
        return LoaderState(
            info,
            replace(position, epoch=epoch, steps=steps, workers=workers),
            consumed=consumed,
            world_size=world_size() if is_distributed() else None,
            streams=None if self.stream is None else self.stream.state_dict(steps)["streams"],
            library=library.save(epoch, consumed) if library is not None and library.resumes_itself else None,
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Check ``state_dict`` (``check_resumable``) and record it for the next ``iter()``."""
        info = self.source.sharding()
        saved = check_resumable(state_dict, info, self.library)
        if self.stream is not None:
            self.stream.load_state_dict({"streams": saved.streams})
        at, resharded = saved.position, saved.sharding.num_processes != info.num_processes
        handed = self._hand_to_library(saved)
        # NOTE: another number of processes continues after everything consumed, its steps counted as taken;
        # so does a library that continues the epoch itself (the loader then skips nothing).
        base, base_steps = (saved.consumed, at.steps) if resharded or handed else (at.base, at.base_steps)
        workers = _stream_epoch_workers(saved, info, self.source.workers())
        self.pending = replace(at, base=base, base_steps=base_steps, workers=workers)
        self.position.epoch = at.epoch
        if resharded and self.resume_hook is not None:
            self.resume_hook.resharded()


def _stream_epoch_workers(saved: LoaderState, info: ShardingInfo, num_workers: int) -> int | None:
    """The worker count a stream's resumed epoch must finish under, when it is not the loader's own.

    NOTE: a stream's batches come out of its ``DataLoader`` workers interleaved, each worker reading its
    own part (split by the dataset, or by ``shard(W, w)``), so an epoch's batches and their order depend
    on the number of workers: only the count the epoch started with continues it exactly. The rest of
    the epoch is read with that count, and the loader's own applies from the next epoch (docs/DESIGN.md,
    "Elastic resume"). A map-style loader's position is indices, which any number of workers fetches alike.
    """
    epoch, steps, saved_workers = saved.position.epoch, saved.position.steps, saved.position.workers
    if info.sampler not in STREAM_KINDS or steps == 0 or saved_workers == num_workers:
        return None
    if not is_distributed() or dist.get_rank() == 0:
        warn(
            f"lightning_shard: the stream state was saved in epoch {epoch} at step {steps} with "
            f"`num_workers={saved_workers}`; this loader has `num_workers={num_workers}`. The rest of epoch "
            f"{epoch} is read with {saved_workers} workers (a stream's batches and their order depend on "
            f"the number of workers, so only that count continues the epoch exactly); `num_workers={num_workers}` "
            "applies from the next epoch.",
            WorkerCountWarning,
            stacklevel=4,
        )
    return saved_workers


class WorkerCountWarning(UserWarning):
    """A stream's epoch resumed under another ``num_workers`` finishes with the count it was saved with.

    The rest of that epoch is read by as many workers as it was saved with (a stream's split among workers
    cannot change mid-epoch); the next epoch uses the loader's own ``num_workers``.
    """

    def __init__(self, message: str) -> None:
        """
        Args:
            message: the saved and the current worker counts.
        """
        super().__init__(message)
