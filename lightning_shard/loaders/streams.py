"""Streams: one end agreement (two integers all-reduced per fetch, one batch ahead), four ways to end (the
``stream_ends`` policies, ``loaders/position.py``; docs/DESIGN.md, "Streaming data", "No hangs", "Scale")."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast, get_args

import torch.distributed as dist

from lightning_shard.comm.collectives import all_gather_objects, is_distributed
from lightning_shard.loaders.position import OWN, PAD, SAME, SHORTEST, StreamEnds, stream_ends_for
from lightning_shard.loaders.stream_agreement import END, Agreement, SameStreamCheck, Share
from lightning_shard.log import warn

if TYPE_CHECKING:
    from lightning_shard.loaders.position import DataKind, Position

_QUEUED = 16
"""Paddings kept for batches yielded but not yet consumed (Lightning reads one batch ahead)."""


@dataclass(frozen=True)
class StreamReport:
    """How one epoch of a sharded stream went, the same on every process.

    Attributes:
        epoch: the epoch.
        steps: steps taken (by every process) in this run of the epoch.
        read: real samples each process yielded in this run, by rank.
        padded: samples each process yielded again from the start of its share, by rank.
        ended_at: the step at which each process's stream ended (``None``: it had not), by rank.
        unseen: samples left in the streams when all stopped at the shortest (``"shortest"`` only).
    """

    epoch: int
    steps: int
    read: tuple[int, ...]
    padded: tuple[int, ...]
    ended_at: tuple[int | None, ...]
    unseen: int | None = None

    def summary(self) -> str:
        """One line: samples read, padded, left unseen, per process where they differ."""
        text = f"stream epoch {self.epoch}: {self.steps} steps, {sum(self.read)} samples read {_per_rank(self.read)}"
        if any(self.padded):
            text += f", {sum(self.padded)} padded by restarting shares {_per_rank(self.padded)}"
        if self.unseen is not None:
            text += f", {self.unseen} left unseen (all stopped at the shortest stream)"
        return text


def _per_rank(counts: tuple[int, ...]) -> str:
    return "(" + ", ".join(f"rank {rank}: {count}" for rank, count in enumerate(counts)) + ")"


class StreamRun:
    """The position and end agreement of process ``process_index`` of ``num_processes`` reading a stream of
    ``kind``, whose ``stream_ends`` policy it follows (a share of its own, ``"shares"``, is ``resumable``: the
    loader itself skips its batches on resume); ``spans_group``: every rank of the default group iterates it
    (then the ends can be agreed on)."""

    def __init__(
        self, kind: DataKind, num_processes: int, process_index: int, *, spans_group: bool = True
    ) -> None:
        self.resumable = kind.source == "shares"
        # NOTE: the other kind's even policy is refused: a share of its own is padded, a strided stream ends
        # together ("same").
        refused = stream_ends_for(strided=self.resumable, even_batches=True)
        allowed = [ends for ends in get_args(StreamEnds) if ends != refused]
        if kind.stream_ends not in allowed:
            raise ValueError(
                f"`stream_ends` must be one of {allowed} for this stream, got {kind.stream_ends!r}. Leave it "
                "`None`: the stream's kind then decides (`stream_ends_for`)."
            )
        self.stream_ends = cast(StreamEnds, kind.stream_ends)  # NOTE: one of `allowed`
        """The kind's ``stream_ends`` policy."""
        self.num_processes = num_processes
        self.process_index = process_index
        self.spans_group = spans_group
        self._paddings: deque[int] = deque(maxlen=_QUEUED)
        self.report: StreamReport | None = None
        """The last finished epoch's report (``None`` under ``"same"``: nothing to report)."""
        self._agreement: Agreement | None = None
        """The current (or last) epoch's agreement, where its processes agree on its end."""

    @property
    def uneven(self) -> bool:
        """Whether the processes may take different numbers of real batches (all policies but ``"same"``)."""
        return self.stream_ends != SAME

    @property
    def even_batches(self) -> bool:
        """Whether every process takes as many steps with real or padded batches (the state's ``even_batches``)."""
        return self.stream_ends in (SAME, PAD)

    @property
    def exchanged(self) -> int:
        """Bytes this process all-reduced in the current (or last) epoch's agreement (checks, then the report)."""
        return 0 if self._agreement is None else self._agreement.sent

    def take_padding(self) -> int:
        """Padding samples in the oldest batch yielded and not yet taken: call it once per consumed batch (a
        consumer that reads ahead, as Lightning, gets the batch it is about to process)."""
        return self._paddings.popleft() if self._paddings else 0

    # -- position ---------------------------------------------------------------------------------
    def restored_ends(self, streams: list[dict[str, Any]] | None) -> tuple[int | None, ...] | None:
        """The per-process ends a saved state's ``streams`` records (states of 0.2 and 0.3; ``None``: none,
        or another number of processes'), which a restore carries (``Position.ended_at``)."""
        ends = tuple(entry["ended_at"] for entry in streams or [])
        return ends if len(ends) == self.num_processes and self.resumable else None

    def saved_ends(self) -> list[dict[str, Any]] | None:
        """What a state records in ``streams``: ``[]`` for a stream the loader resumes itself (each process finds
        its own end again on resume), ``None`` for any other."""
        return [] if self.resumable else None

    # -- one epoch --------------------------------------------------------------------------------
    def batches(
        self,
        first: Iterator[Any],
        restart: Callable[[], Iterator[Any]],
        rows: Callable[[Any], int],
        start: Position,
        move: Callable[[Any], Any] | None,
        check: SameStreamCheck | None = None,
    ) -> Generator[tuple[Any, bool], None, None]:
        """This process's batches of the epoch ``start`` begins (``restart``: a pass from its start) with
        whether each is known to be the last, ending on every process at the same step but under ``"own"``;
        ``move`` is applied before the next fetch. A share of its own resumed mid-epoch drops what it had
        consumed, continuing in its padding where it had ended (``Share``). ``check``: a strided stream's
        digests ride on the agreement, the first two batches' compared before the first is yielded."""
        skip, before = start.start if self.resumable else 0, start.steps_before_resume
        recorded = None if start.ended_at is None or not skip else start.ended_at[self.process_index]
        share = Share(first, restart, skip, None if recorded is None else recorded - before)
        epoch, steps = start.epoch or 0, start.steps
        self._paddings.clear()
        same = self.stream_ends == SAME
        # NOTE: the ends are agreed where every rank of the group iterates this stream (all of them, or a
        # whole mesh's ranks).
        agrees = self.stream_ends != OWN and self.num_processes > 1 and is_distributed() and self.spans_group
        agreement = self._agreement = Agreement() if agrees else None
        counts = [0, 0]  # real and padding samples this process yielded in this run

        def fetch() -> Any:
            """The next batch without its mark, its check started: whether this share ended, whether it is
            empty, and the batch's digest and its square (``SameStreamCheck``)."""
            batch, digest = (share.fetch(), 0) if check is None else check.unwrap(share.fetch())
            if agreement is not None:
                digests = () if check is None else (digest, digest * digest)
                agreement.start(share.exhausted, _end(share, before) == 0, *digests)
            return batch

        step = steps
        current = fetch()
        while True:
            if agreement is not None:
                # NOTE: the check of this batch started when it was fetched, one step ago.
                sums = agreement.settle()
                if check is not None:
                    check.verify(sums, step)
                if self._stops(sums, step, current is END, _end(share, before) == 0):
                    break
                if current is END:
                    current = share.padding()
            elif current is END:
                break
            if not same:
                samples = rows(current)
                self._paddings.append(samples if share.exhausted else 0)
                counts[share.exhausted] += samples
            if move is not None:
                current = move(current)
            following = fetch()
            if agreement is not None and check is not None and step == steps:
                # NOTE: settled again at the next step, the same sums.
                check.verify(agreement.settle(), step + 1)
            step += 1
            try:
                # NOTE: under "same" a stream that ended here ended on every process (else the next check
                # raises); under the other policies the last batch is known only at the next check.
                yield current, same and following is END
            except GeneratorExit:
                # NOTE: the loop left the epoch early (Lightning stops after `len` batches): settle the check
                # every process started for the next batch, so no collective of ours is in flight when the
                # group goes down (a pending one can abort the process at exit). Not a context manager: one
                # per batch costs microseconds.
                if agreement is not None:
                    agreement.settle()
                raise
            current = following
        if not same:
            left = None
            if agreement is not None and self.stream_ends == SHORTEST:
                # NOTE: what this process leaves behind by stopping at the shortest stream, read to be counted.
                left = 0 if share.exhausted else rows(current) + sum(rows(batch) for batch in share.iterator)
            self.report = self._report(counts, _end(share, before), left, epoch, step - steps)

    def _stops(self, sums: tuple[int, ...], step: int, ended_here: bool, empty_here: bool) -> bool:
        """Whether the epoch ends here, from the sums of a check (the same on every process); raises
        everywhere on an uneven end it cannot take: under ``"same"`` a stream that ran out on some processes
        only (``ended_here``: on this one), under ``"pad"`` an empty share (``empty_here``: this one's)."""
        world = dist.get_world_size()
        if self.stream_ends == SAME and 0 < sums[0] < world:
            ended_on = [rank for rank, done in enumerate(all_gather_objects(ended_here)) if done]
            raise RuntimeError(
                f"The iterable dataset ran out on processes {ended_on} of {world} after {step} batches, "
                "but not on the others: it yields different elements on different processes. Every process "
                "reads the whole stream and keeps its own slice, so make the dataset yield the same stream "
                "on every process (do not split it by rank yourself), or shard it yourself and use a plain "
                "`DataLoader` without `prepare_data_loader`."
            )
        # NOTE: under a mesh every rank of a data-parallel index reads the same share (or stream) and sends
        # the same flags, so each is counted once per rank of its index.
        peers = world // self.num_processes
        ended, empty = (total // peers for total in sums[:2])
        if empty and ended < self.num_processes and self.stream_ends == PAD:
            flagged = all_gather_objects(self.process_index if empty_here else None)
            raise RuntimeError(
                f"The shares of processes {sorted({index for index in flagged if index is not None})} of the "
                "stream are empty, so they cannot be padded while the others still have data "
                "(`even_batches=True`). Give every process at least one non-empty shard, or use "
                "`even_batches=False` (all stop at the shortest stream)."
            )
        return ended == self.num_processes or (ended > 0 and self.stream_ends == SHORTEST)

    def _report(
        self, counts: list[int], ended_at: int | None, left: int | None, epoch: int, steps: int
    ) -> StreamReport:
        """The epoch's report from this process's real and padding samples (``counts``), end and samples ``left``
        unseen: every process's entries summed once over the group where its processes agree, else its own."""
        size, rank = self.num_processes, self.process_index
        values = [0] * (3 * size + 1)
        values[rank], values[size + rank] = counts
        values[2 * size + rank] = 0 if ended_at is None else ended_at + 1
        values[-1] = left or 0
        if self._agreement is not None:
            self._agreement.start(*values)
            # NOTE: under a mesh each data-parallel index's entries are written by every rank of that index.
            peers = dist.get_world_size() // self.num_processes
            values = [value // peers for value in self._agreement.settle()]
        ends = tuple(None if end == 0 else end - 1 for end in values[2 * size : 3 * size])
        unseen = None if left is None else values[-1]
        if unseen and rank == 0:
            warn(
                f"lightning_shard: the streams of processes {[r for r, e in enumerate(ends) if e is not None]} "
                f"ended first, so every process stopped there (`even_batches=False`); {unseen} samples of the other "
                "processes' shares were left unseen this epoch. Use `even_batches=True` to pad the shorter shares "
                "instead.",
                stacklevel=2,
            )
        return StreamReport(epoch, steps, tuple(values[:size]), tuple(values[size : 2 * size]), ends, unseen)


def _end(share: Share, steps_before: int) -> int | None:
    """The epoch step at which ``share``'s real pass ended (``None``: not yet)."""
    return None if share.end is None else steps_before + share.end
