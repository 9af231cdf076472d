"""Streams: one end agreement, four ways to end (docs/DESIGN.md, "Streaming data", "No hangs").

Each fetch starts, one batch ahead and asynchronously, an all-reduce of one integer, waited for only
before that batch is yielded (its latency overlaps the step on the batch before; a check at the epoch's
end would pair with the collectives of a step one process takes alone): how many processes' streams have
ended. Its size does not depend on the number of processes (docs/DESIGN.md, "Scale"). What follows is
the ``stream_ends`` policy:

- ``"same"`` (strided, ``even_batches=True``): every process reads the whole stream, so all end at the same
  step; if only some did, every process raises at once.
- ``"pad"`` (native, ``even_batches=True``): at a step where that count rises (the same step on every
  process), one more all-reduce of a ``3 x N`` vector says which processes' streams have ended and how
  many real and padding samples each yielded (so the state needs no collective). A process whose stream
  ended continues from the start of its share until every stream has ended.
- ``"shortest"`` (``even_batches=False``): the same; every process stops at the first end; the others
  count what they leave unseen (by reading it: a stream has no length) and rank 0 reports it.
- ``"own"`` (predict): no agreement; each process reads its share to its end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, get_args

import torch
import torch.distributed as dist

from lightning_shard.comm.collectives import communication_device, is_distributed
from lightning_shard.loaders.position import Position
from lightning_shard.loaders.stream_agreement import END, Agreement, Share, all_ended
from lightning_shard.log import warn

StreamEnds: TypeAlias = Literal["pad", "shortest", "own", "same"]
"""What a loader over a stream does when its processes' streams may end at different steps (see above)."""
PAD: Final = "pad"
SHORTEST: Final = "shortest"
OWN: Final = "own"
SAME: Final = "same"
STREAMENDS: tuple[StreamEnds, ...] = get_args(StreamEnds)


def stream_ends_for(strided: bool, even_batches: bool, uneven: StreamEnds = SHORTEST) -> StreamEnds:
    """The ``stream_ends`` policy of a stream, decided here only (``loaders/kinds.py`` asks once).

    With ``even_batches``: a strided stream ends at the same step on every process (``"same"``:
    ``IterableDatasetShard`` pads the last global batch) and a share of its own is padded (``"pad"``).
    Without: ``uneven``, ``"shortest"`` for a training loop or ``"own"`` where no step is collective (predict).
    """
    if not even_batches:
        return uneven
    return SAME if strided else PAD


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
    """The ``stream_ends`` policy, position and end agreement of a loader over a stream.

    Args:
        stream_ends: ``"same"`` (strided streams only), ``"pad"``, ``"shortest"`` or ``"own"``.
        num_processes, process_index: ``N`` and ``r``.
        resumable: whether the loader itself skips batches on resume (native shares; a strided
            stream skips inside ``IterableDatasetShard``).
        spans_group: whether every rank of the default group iterates it (then the ends can be agreed on).
    """

    def __init__(
        self,
        stream_ends: StreamEnds,
        num_processes: int,
        process_index: int,
        *,
        resumable: bool,
        spans_group: bool = True,
    ) -> None:
        # NOTE: a share of its own (resumable) is padded, a strided stream ends together ("same").
        allowed = [ends for ends in STREAMENDS if ends != (SAME if resumable else PAD)]
        if stream_ends not in allowed:
            raise ValueError(
                f"`stream_ends` must be one of {allowed} for this stream, got {stream_ends!r}. Leave it `None`: "
                "the stream's kind then decides (`stream_ends_for`)."
            )
        self.stream_ends = stream_ends
        self.num_processes = num_processes
        self.process_index = process_index
        self.resumable = resumable
        self.spans_group = spans_group
        self.ended_at: list[int | None] = [None] * num_processes
        self._paddings: deque[int] = deque(maxlen=_QUEUED)
        self.report: StreamReport | None = None
        """The last finished epoch's report (``None`` under ``"same"``: nothing to report)."""
        self._last_vector: list[int] | None = None

    @property
    def uneven(self) -> bool:
        """Whether the processes may take different numbers of real batches (all policies but ``"same"``)."""
        return self.stream_ends != SAME

    @property
    def even_batches(self) -> bool:
        """Whether every process takes as many steps with real or padded batches (the state's ``even_batches``)."""
        return self.stream_ends in (SAME, PAD)

    def take_padding(self) -> int:
        """Padding samples in the oldest batch yielded and not yet taken: call it once per consumed batch.

        A consumer that reads ahead (Lightning prefetches one batch of a stream) takes the value of the
        batch it is about to process, not of the last one yielded.
        """
        return self._paddings.popleft() if self._paddings else 0

    # -- position ---------------------------------------------------------------------------------
    def restored_ends(self, streams: list[dict[str, Any]] | None) -> tuple[int | None, ...] | None:
        """The per-process ends a saved state's ``streams`` record (``None``: none, or another number of
        processes'), which a restore carries (``Position.ended_at``)."""
        ends = tuple(entry["ended_at"] for entry in streams or [])
        return ends if len(ends) == self.num_processes and self.resumable else None

    def saved_ends(self, ended_at: Sequence[int | None] | None, steps: int) -> list[dict[str, Any]] | None:
        """Every process's position as a state records it, ``[{"ended_at": step}, ...]`` (``None`` for a stream
        the loader does not resume itself); at 0 steps, an epoch's start, no process has ended."""
        if not self.resumable:
            return None
        ends = ended_at if ended_at is not None and steps else [None] * self.num_processes
        return [{"ended_at": end} for end in ends]

    # -- one epoch --------------------------------------------------------------------------------
    def batches(
        self,
        first: Iterator[Any],
        restart: Callable[[], Iterator[Any]],
        rows: Callable[[Any], int],
        start: Position,
        move: Callable[[Any], Any] | None,
    ) -> Generator[tuple[Any, bool], None, None]:
        """This process's batches of the epoch ``start`` begins (``restart``: a pass from its start) with
        whether each is known to be the last, ending on every process at the same step but under ``"own"``;
        ``move`` is applied before the next fetch. A share of its own resumed mid-epoch continues where the
        restore's ``ended_at`` says."""
        resumed = start.ended_at is not None and start.start > 0
        self.ended_at = list(start.ended_at) if resumed else [None] * self.num_processes  # type: ignore[arg-type]
        skip = start.start if self.resumable else 0
        epoch, steps = start.epoch or 0, start.steps
        share = Share(first, restart, skip, self.ended_at[self.process_index])
        self._paddings.clear()
        same = self.stream_ends == SAME
        agreement = Agreement(self.num_processes, self.process_index, not same) if self._agrees() else None
        counts = [0, 0]  # real and padding samples this process yielded in this run
        step = steps
        current = share.fetch()
        if agreement is not None:
            agreement.start(share.exhausted, counts)
        while True:
            if agreement is not None:
                # NOTE: the check of this batch started when it was fetched, one step ago.
                if self._stops(agreement.settle(), step, current is END):
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
            following = share.fetch()
            if agreement is not None:
                agreement.start(share.exhausted, counts)
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
                    agreement.drain()
                raise
            current = following
        if not same:
            self._finish(agreement, share, current, counts, epoch, step - steps, rows)

    def _agrees(self) -> bool:
        """Whether every rank of the group iterates this stream (all of them, or a whole mesh's ranks)."""
        return self.stream_ends != OWN and self.num_processes > 1 and is_distributed() and self.spans_group

    def _stops(self, vector: list[int] | None, step: int, ended_here: bool) -> bool:
        """Whether the epoch ends here; records who ended; raises everywhere on an uneven end it cannot take.

        ``vector`` is ``None`` when no stream ended since the last check: nothing changes.
        """
        if vector is None:
            return False
        if self.stream_ends == SAME:
            return all_ended(vector[0], ended_here, step)
        size = self.num_processes
        ended = vector[:size]
        for rank, flag in enumerate(ended):
            if flag and self.ended_at[rank] is None:
                self.ended_at[rank] = step
        self._last_vector = vector
        if not any(ended):
            return False
        if self.stream_ends == SHORTEST or all(ended):
            return True
        empty = [rank for rank, end in enumerate(self.ended_at) if end == 0]
        if empty:
            raise RuntimeError(
                f"The shares of processes {empty} of the stream are empty, so they cannot be padded while the "
                f"others still have data (`even_batches=True`). Give every process at least one non-empty shard, "
                "or use `even_batches=False` (all stop at the shortest stream)."
            )
        return False

    def _finish(
        self,
        agreement: Agreement | None,
        share: Share,
        current: Any,
        counts: list[int],
        epoch: int,
        steps: int,
        rows: Callable[[Any], int],
    ) -> None:
        size, vector = self.num_processes, self._last_vector
        if agreement is not None and vector is not None:
            read, padded = tuple(vector[size : 2 * size]), tuple(vector[2 * size :])
        else:
            read, padded = (tuple(n if r == self.process_index else 0 for r in range(size)) for n in counts)
        unseen = None
        if self.stream_ends == SHORTEST and agreement is not None:
            unseen = self._unseen(share, current, rows)
        self.report = StreamReport(epoch, steps, read, padded, tuple(self.ended_at), unseen)
        self._last_vector = None

    def _unseen(self, share: Share, current: Any, rows: Callable[[Any], int]) -> int:
        """Samples every process left behind by stopping at the shortest stream (read to be counted)."""
        left = 0 if current is END or share.exhausted else rows(current)
        left += sum(rows(batch) for batch in share.rest())
        total = torch.tensor([left], dtype=torch.int64, device=communication_device())
        dist.all_reduce(total)
        unseen = int(total.item()) // (dist.get_world_size() // self.num_processes)
        if unseen and self.process_index == 0:
            warn(
                f"lightning_shard: the streams of processes {[r for r, e in enumerate(self.ended_at) if e is not None]} "
                f"ended first, so every process stopped there (`even_batches=False`); {unseen} samples of the other "
                "processes' shares were left unseen this epoch. Use `even_batches=True` to pad the shorter shares "
                "instead.",
                stacklevel=2,
            )
        return unseen


ENDS_TEXT = {
    PAD: "uneven ends padded by restarting the shorter shares (padded samples counted at each epoch's end)",
    SHORTEST: "all stop at the shortest stream (samples left unseen reported at each epoch's end)",
    OWN: "each process reads its part to its end",
}


def describe(how: str, stream: StreamRun) -> str:
    """How a loader's stream is split (``how``) and its uneven ends handled, for the plan line."""
    ends = ENDS_TEXT.get(stream.stream_ends)
    return f"{how}; {ends}" if ends else how
