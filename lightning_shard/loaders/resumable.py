"""What both loaders hold: a ``Resumption`` (epochs, the position in the epoch, the saved state and a restore
waiting for the next ``iter()``), the one writer of the live ``Progress`` (docs/DESIGN.md, "No singleton")."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lightning_shard._checks import check_non_negative
from lightning_shard.comm.collectives import is_distributed, world_size
from lightning_shard.loaders.position import Position, Progress, ResumeHook, ShardingInfo
from lightning_shard.loaders.state import (
    LoaderState,
    check_resumable,
    decode_generator_state,
    encode_generator_state,
)
from lightning_shard.log import warn

if TYPE_CHECKING:
    from lightning_shard.loaders.source import BatchSource


class Resumption:
    """A loader's epochs and position over its ``source``: applies a restore at the next ``iter()`` (the first
    one skips ``skip_batches`` steps; a ``ValueError`` / ``TypeError`` if that is not a count), and saves the
    position."""

    def __init__(self, source: BatchSource, *, skip_batches: int = 0) -> None:
        self.source = source
        self.progress = Progress()
        """The epoch in progress (or the next), updated at every batch."""
        self.pending: Position | None = None
        """A restore (``load_state_dict``, a skip) that the next ``iter()`` applies."""
        self.resume_hook: ResumeHook | None = None
        self.remainder = -1
        if check_non_negative("skip_batches", skip_batches):
            self.skip(skip_batches)

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration covers."""
        return self.progress.epoch

    def current(self) -> Position:
        """Where the epoch stands: a pending restore, the epoch in progress, or the next epoch's start."""
        if self.pending is not None:
            return self.pending
        return self.progress.position() if self.progress.in_epoch else Position(self.progress.epoch)

    def length(self) -> int:
        """Steps of the epoch in progress (or the next), counting those taken before a resume."""
        at = self.current()
        return at.steps_before_resume + self.source.length_after(at.read_before_resume)

    def skip(self, steps: int, epoch: int | None = None) -> None:
        """Skip ``steps`` steps of ``epoch`` (default: the epoch the next ``iter()`` covers) by index."""
        self.pending = Position(epoch, steps=steps)

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch``; selecting another one than the one being iterated abandons that one."""
        progress = self.progress
        if epoch != progress.epoch and progress.in_epoch:
            # NOTE: e.g. Lightning stops after `len(loader)` batches, without exhausting the iterator.
            progress.begun, progress.steps = None, 0
        progress.epoch = epoch
        self.source.set_epoch(epoch)

    def begin_epoch(self) -> Position:
        """Apply a pending restore (or rewind), record the epoch's generator state; the epoch's start."""
        self.source.synchronize()
        restore, self.pending = self.pending, None
        progress, begun = self.progress, self.progress.begun
        if restore is None and begun is not None and self.resume_hook is None:
            # NOTE: the iteration before was left before its end (a `break`, as in a Fabric loop that trains
            # K steps an epoch): a new `iter()` starts the next epoch, as a `DataLoader`'s draws a new order.
            # A loop that tells the loader what it consumed (Lightning's, through `resume_hook`) also sets
            # its epochs, and may call `iter()` again within one (Lightning does after a reload).
            self.finish_epoch()
        elif restore is None and begun is not None and progress.steps == 0 and begun.generator_state:
            # NOTE: Lightning iterates a reloaded loader twice at the epoch's start; the first iteration's
            # workers may have drawn the order already. Nothing was consumed: begin from the epoch's start
            # again, so the order does not depend on the number of workers.
            restore = Position(self.epoch, generator_state=begun.generator_state)
        progress.end = False
        epoch = self.epoch if restore is None or restore.epoch is None else restore.epoch
        self.set_epoch(epoch)
        if restore is not None:
            generator, seeded, library = self.source.generator(), self.source.seeded(), self.source.library
            if restore.generator_state is not None and generator is not None:
                generator.set_state(decode_generator_state(restore.generator_state))
            if restore.sampler_seed is not None and seeded is not None:
                seeded.initial_seed = restore.sampler_seed
            if restore.library is not None and library is not None:
                library.restore(restore.library, epoch, restore.read_before_resume)
        start = replace(
            restore if restore is not None else Position(epoch),
            epoch=epoch,
            generator_state=encode_generator_state(self.source.generator()),
            sampler_seed=None,
            library=None,
        )
        progress.begun, progress.steps = start, start.steps
        sharding = self.source.sharding()
        self.remainder = sharding.remainder(before=sharding.samples_in(start.read_before_resume))
        return start

    def run(self, epoch: Generator[tuple[Any, bool], None, None]) -> Iterator[Any]:
        """Yield the batches of ``epoch`` (each with whether it is the last), counting each (the one place the live
        position moves); finish the epoch when it runs out, close it when the iteration is left early."""
        progress = self.progress
        try:
            for batch, last in epoch:
                progress.steps += 1
                progress.end = last
                yield batch
        finally:
            epoch.close()
        progress.end = True
        self.finish_epoch()

    def finish_epoch(self) -> None:
        """The epoch ended: the next ``iter()`` starts the one after it."""
        self.progress.begun, self.progress.steps = None, 0
        self.set_epoch(self.epoch + 1)

    def sampler_seed(self) -> int | None:
        """The seed of a seeded order (``SamplerKind.seeded``: it ignores the generator's state)."""
        seeded = self.source.seeded()
        return None if seeded is None else int(seeded.initial_seed)

    def snapshot(self) -> Position:
        """Where the next batch comes from: a pending restore, the epoch in progress, or the next epoch (from
        the generator's state now, not the state the finished epoch started with)."""
        return self._drawn(self.current())

    def _drawn(self, at: Position) -> Position:
        """``at`` with the loader's epoch, the generator's state now and the order's seed where it has none."""
        return replace(
            at,
            epoch=self.epoch if at.epoch is None else at.epoch,
            generator_state=at.generator_state or encode_generator_state(self.source.generator()),
            sampler_seed=self.sampler_seed() if at.sampler_seed is None else at.sampler_seed,
        )

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self, steps: int | None = None) -> dict[str, Any]:
        """The position as plain data, the same on every process (see ``ResumableLoader.state_dict``)."""
        hook = self.resume_hook
        consumed = hook.consumed() if steps is None and hook is not None else None
        if consumed is not None and consumed.epoch_finished:
            # NOTE: an uninterrupted run starts the next epoch from the generator as the last one left it. A
            # loader whose iterator ran to its end has already moved on to the next epoch.
            following = self.epoch + 1 if self.progress.in_epoch else self.epoch
            epoch = following if consumed.next_epoch is None else consumed.next_epoch
            return self.state_at(self._drawn(Position(epoch)), 0).to_dict()
        steps = consumed.steps if consumed is not None else steps
        return self.state_at(self.snapshot(), steps).to_dict()

    def state_at(self, position: Position, steps: int | None) -> LoaderState:
        """The state of ``position`` once ``steps`` of its epoch are consumed (default: its own steps)."""
        info = self.source.sharding()
        steps = position.steps if steps is None else steps
        if steps < position.steps_before_resume:
            raise ValueError(
                f"`steps={steps}` is below the {position.steps_before_resume} steps this epoch took before it was "
                "resumed on this number of processes. Pass the steps consumed in the whole epoch."
            )
        workers = int(self.source.loader.num_workers) if position.workers is None else position.workers
        epoch = position.epoch or 0
        consumed = position.read_before_resume + (steps - position.steps_before_resume) * info.step_size
        stream, library = self.source.stream, self.source.library
        return LoaderState(
            info,
            replace(position, epoch=epoch, steps=steps, workers=workers),
            consumed=consumed,
            world_size=world_size() if is_distributed() else None,
            streams=None if stream is None else stream.saved_ends(),
            library=library.save(epoch, consumed) if library is not None and library.resumes_itself else None,
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Check ``state_dict`` (``check_resumable``) and record it for the next ``iter()``."""
        info, stream, library = self.source.sharding(), self.source.stream, self.source.library
        saved = check_resumable(state_dict, info, library)
        ends = None if stream is None else stream.restored_ends(saved.streams)
        at, resharded = saved.position, saved.sharding.num_processes != info.num_processes
        # NOTE: a library that continues an epoch itself takes a position mid-epoch: checked now, handed to it
        # when the epoch begins.
        handed = False
        if library is not None and library.resumes_itself and saved.library is not None and at.steps > 0:
            library.check_restore(saved.library)
            handed = True
        # NOTE: another number of processes continues after everything consumed, its steps counted as taken;
        # so does a library that continues the epoch itself (the loader then skips nothing).
        if resharded or handed:
            at = replace(at, read_before_resume=saved.consumed, steps_before_resume=at.steps)
        # NOTE: a library that continues the epoch itself deals what is left to any number of workers.
        workers = None if handed else _stream_epoch_workers(saved, info, self.source.loader.num_workers)
        self.pending = replace(at, workers=workers, ended_at=ends, library=saved.library if handed else None)
        self.progress.epoch = at.epoch or 0
        if resharded and self.resume_hook is not None:
            self.resume_hook.resharded()


def _stream_epoch_workers(saved: LoaderState, info: ShardingInfo, num_workers: int) -> int | None:
    """The worker count a stream's resumed epoch must finish under, when it is not the loader's own: an epoch's
    batches and their order depend on its workers' split (docs/DESIGN.md, "Elastic resume"); a map-style
    loader's position is indices, which any number of workers fetches alike."""
    epoch, steps, saved_workers = saved.position.epoch, saved.position.steps, saved.position.workers
    if not info.streamed or steps == 0 or saved_workers == num_workers:
        return None
    # NOTE: `warn` speaks from rank 0 only.
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
    """A stream's epoch resumed under another ``num_workers`` finishes with the count it was saved with (its
    split among workers cannot change mid-epoch); the next epoch uses the loader's own ``num_workers``. Its
    message gives the saved and the current worker counts."""
