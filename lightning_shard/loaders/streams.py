"""Streams whose processes may run out at different steps: one agreement, three ways to end
(docs/DESIGN.md, "Streaming data").

Each fetch starts, one batch ahead and asynchronously, an all-reduce of a ``3 x N`` vector: which
processes' streams have ended, and how many real and padding samples each process yielded so far. So
every process learns at the same step that some stream ended, and all know each other's position
without any collective when the state is saved. What happens then is the policy:

- ``"pad"`` (``even_batches=True``): a process whose stream ended continues from the start of its
  share until every stream has ended; the epoch ends on all processes at the same step.
- ``"shortest"`` (``even_batches=False``): every process stops at the first end; the others count what
  they leave unseen (by reading it: a stream has no length) and rank 0 reports it.
- ``"own"`` (predict): no agreement; each process reads its share to its end.
"""

from __future__ import annotations

import itertools
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist

from lightning_shard.comm.collectives import communication_device, is_distributed
from lightning_shard.loaders.position import ShardingInfo
from lightning_shard.loaders.settings import NATIVE_STREAM_KINDS
from lightning_shard.sampling.iterable_shard import IterableDatasetShard
from lightning_shard.sampling.native_stream import NATIVE, NativeStreamShard

PAD, SHORTEST, OWN = "pad", "shortest", "own"
STREAM_ENDS = (PAD, SHORTEST, OWN)

_END = object()
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
    """The policy, position and agreement of a loader over a stream that may end unevenly.

    Args:
        policy: ``"pad"``, ``"shortest"`` or ``"own"``.
        num_processes, process_index: ``N`` and ``r``.
        resumable: whether the loader itself skips batches on resume (native shares; a strided
            stream skips inside ``IterableDatasetShard``).
    """

    def __init__(
        self,
        policy: str,
        num_processes: int,
        process_index: int,
        *,
        resumable: bool,
        spans_group: bool = True,
    ) -> None:
        if policy not in STREAM_ENDS:
            raise ValueError(f"`stream_ends` must be one of {list(STREAM_ENDS)}, got {policy!r}.")
        self.policy = policy
        self.num_processes = num_processes
        self.process_index = process_index
        self.resumable = resumable
        self.spans_group = spans_group
        """Whether every rank of the default group iterates this stream (then the ends can be agreed on)."""
        self.ended_at: list[int | None] = [None] * num_processes
        self._paddings: deque[int] = deque(maxlen=_QUEUED)
        self.report: StreamReport | None = None
        """The last finished epoch's report."""
        self._pending: list[int | None] | None = None
        self._skip = 0
        self._last_vector: list[int] | None = None

    def take_padding(self) -> int:
        """Padding samples in the oldest batch yielded and not yet taken: call it once per consumed batch.

        A consumer that reads ahead (Lightning prefetches one batch of a stream) takes the value of the
        batch it is about to process, not of the last one yielded.
        """
        return self._paddings.popleft() if self._paddings else 0

    # -- position ---------------------------------------------------------------------------------
    def restore(self, ended_at: list[int | None] | None) -> None:
        """Record the per-process ends of a saved state; the next ``begin`` applies them."""
        self._pending = None if ended_at is None else list(ended_at)

    def begin(self, start: int) -> None:
        """Start an epoch at step ``start`` (a restore recorded by ``restore``, or a fresh epoch)."""
        pending, self._pending = self._pending, None
        self.ended_at = pending if pending is not None and start else [None] * self.num_processes
        self._skip = start if self.resumable else 0

    def entries(self, steps: int) -> list[dict[str, Any]] | None:
        """Every process's position at ``steps`` consumed steps, for the state (``None`` if not resumable)."""
        if not self.resumable:
            return None
        ended = self._pending if self._pending is not None else self.ended_at
        return [{"ended_at": end if steps else None} for end in ended]

    # -- one epoch --------------------------------------------------------------------------------
    def batches(
        self,
        first: Iterator[Any],
        restart: Callable[[], Iterator[Any]],
        rows: Callable[[Any], int],
        epoch: int,
    ) -> Iterator[Any]:
        """This process's batches of one epoch, ending on every process at the same step."""
        share = _Share(first, restart, self._skip, self.ended_at[self.process_index])
        self._paddings.clear()
        agreement = _Agreement(self.num_processes, self.process_index) if self._agrees() else None
        counts = [0, 0]  # real and padding samples this process yielded in this run
        step = start = self._skip
        current = share.fetch()
        if agreement is not None:
            agreement.start(share.exhausted, counts)
        while True:
            if agreement is not None:
                # NOTE: the check of this batch started when it was fetched, one step ago: its latency
                # overlaps the step on the batch before, as in the strided loader's agreement.
                if self._stops(agreement.settle(), step):
                    break
                if current is _END:
                    current = share.padding()
            elif current is _END:
                break
            self._paddings.append(rows(current) if share.exhausted else 0)
            counts[share.exhausted] += rows(current)
            following = share.fetch()
            if agreement is not None:
                agreement.start(share.exhausted, counts)
            step += 1
            with drained_on_close(agreement):
                yield current
            current = following
        self._finish(agreement, share, current, counts, epoch, step - start, rows)

    def _agrees(self) -> bool:
        """Whether every rank of the group iterates this stream (all of them, or a whole mesh's ranks)."""
        return self.policy != OWN and self.num_processes > 1 and is_distributed() and self.spans_group

    def _stops(self, vector: list[int], step: int) -> bool:
        """Whether the epoch ends here; records who ended; raises everywhere on an empty share."""
        size = self.num_processes
        ended = vector[:size]
        for rank, flag in enumerate(ended):
            if flag and self.ended_at[rank] is None:
                self.ended_at[rank] = step
        self._last_vector = vector
        if not any(ended):
            return False
        if self.policy == SHORTEST or all(ended):
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
        agreement: _Agreement | None,
        share: _Share,
        current: Any,
        counts: list[int],
        epoch: int,
        steps: int,
        rows: Callable[[Any], int],
    ) -> None:
        size = self.num_processes
        vector = self._last_vector if agreement is not None else None
        read = (
            tuple(vector[size : 2 * size])
            if vector is not None
            else _mine(counts[0], self.process_index, size)
        )
        padded = (
            tuple(vector[2 * size :]) if vector is not None else _mine(counts[1], self.process_index, size)
        )
        unseen = None
        if self.policy == SHORTEST and agreement is not None:
            unseen = self._unseen(share, current, rows)
        self.report = StreamReport(epoch, steps, read, padded, tuple(self.ended_at), unseen)
        self._last_vector = None

    def _unseen(self, share: _Share, current: Any, rows: Callable[[Any], int]) -> int:
        """Samples every process left behind by stopping at the shortest stream (read to be counted)."""
        left = 0 if current is _END or share.exhausted else rows(current)
        left += sum(rows(batch) for batch in share.rest())
        total = torch.tensor([left], dtype=torch.int64, device=communication_device())
        dist.all_reduce(total)
        unseen = int(total.item()) // (dist.get_world_size() // self.num_processes)
        if unseen and self.process_index == 0:
            warnings.warn(
                f"lightning_shard: the streams of processes {[r for r, e in enumerate(self.ended_at) if e is not None]} "
                f"ended first, so every process stopped there (`even_batches=False`); {unseen} samples of the other "
                "processes' shares were left unseen this epoch. Use `even_batches=True` to pad the shorter shares "
                "instead.",
                stacklevel=2,
            )
        return unseen


def _mine(count: int, rank: int, size: int) -> tuple[int, ...]:
    return tuple(count if other == rank else 0 for other in range(size))


class _Share:
    """This process's batches: the real pass over its share, then passes from its start (padding).

    On resume at step ``skip``: a process whose stream had ended at ``ended_at < skip`` continues
    ``skip - ended_at`` batches into its padding (passes of ``ended_at`` batches each); any other
    skips ``skip`` batches of its real pass. Skipped batches are read and dropped: with workers the
    loader interleaves their batches, so only batch counts after interleaving are exact.
    """

    def __init__(
        self, first: Iterator[Any], restart: Callable[[], Iterator[Any]], skip: int, ended_at: int | None
    ) -> None:
        self.restart = restart
        self.exhausted = ended_at is not None and 0 < ended_at < skip
        into = (skip - ended_at) % ended_at if self.exhausted and ended_at else skip
        self.iterator = itertools.islice(first, into, None) if into else first

    def fetch(self) -> Any:
        """The next batch, or ``_END`` when the real pass ends (then ``exhausted``)."""
        if self.exhausted:
            return self.padding()
        batch = next(self.iterator, _END)
        self.exhausted = batch is _END
        return batch

    def padding(self) -> Any:
        """The next batch of a pass from the start of the share, restarting it when it ends."""
        batch = next(self.iterator, _END)
        if batch is _END:
            self.iterator = self.restart()
            batch = next(self.iterator, _END)
        if batch is _END:
            raise RuntimeError("This process's share of the stream yields nothing, so it cannot be padded.")
        return batch

    def rest(self) -> Iterator[Any]:
        """What is left of the real pass (nothing once it ended)."""
        return iter(()) if self.exhausted else self.iterator


class Drainable(Protocol):
    """An end agreement whose started check can be waited for (``_Agreement``, ``shard._EndAgreement``)."""

    def drain(self) -> None: ...


@contextmanager
def drained_on_close(agreement: Drainable | None) -> Iterator[None]:
    """Around a generator's ``yield``: when the loop leaves the epoch early (Lightning stops after ``len``
    batches) and the generator is closed, settle the check every process started for the next batch, so
    no collective of ours is in flight when the process group goes down (a pending one can abort the
    process at exit)."""
    try:
        yield
    except GeneratorExit:
        if agreement is not None:
            agreement.drain()
        raise


class _Agreement:
    """One asynchronous all-reduce per fetch: ended flags, real and padding samples, per process."""

    def __init__(self, num_processes: int, process_index: int) -> None:
        self.size, self.rank = num_processes, process_index
        self._pending: tuple[torch.Tensor, Any] | None = None

    def start(self, exhausted: bool, counts: list[int]) -> None:
        vector = torch.zeros(3 * self.size, dtype=torch.int64, device=communication_device())
        vector[self.rank] = int(exhausted)
        vector[self.size + self.rank] = counts[0]
        vector[2 * self.size + self.rank] = counts[1]
        self._pending = (vector, dist.all_reduce(vector, async_op=True))

    def drain(self) -> None:
        """Wait for a started check whose answer is no longer needed."""
        if self._pending is not None:
            self._pending[1].wait()
            self._pending = None

    def settle(self) -> list[int]:
        assert self._pending is not None  # NOTE: each settle follows its start in `StreamRun.batches`.
        vector, work = self._pending
        self._pending = None
        work.wait()
        # NOTE: under a mesh every rank of a data-parallel index reads the same share and writes the same
        # entries, so each is counted once per rank of its index.
        peers = dist.get_world_size() // self.size
        return [int(value) // peers for value in vector.tolist()]


_ENDS_TEXT = {
    PAD: "uneven ends padded by restarting the shorter shares (padded samples counted at each epoch's end)",
    SHORTEST: "all stop at the shortest stream (samples left unseen reported at each epoch's end)",
    OWN: "each process reads its part to its end",
}


def describe_stream(loader: Any) -> str | None:
    """How ``loader``'s stream is split and its uneven ends handled, for the plan line (``None``: no stream)."""
    dataset, stream = getattr(loader, "dataset", None), getattr(loader, "stream", None)
    if isinstance(dataset, NativeStreamShard):
        how = (
            f"native, each process reads only its share of {dataset.dataset.n_shards} shards"
            if dataset.kind == NATIVE
            else "split by rank by the dataset itself (passed through)"
        )
    elif isinstance(dataset, IterableDatasetShard):
        how = "strided, every process reads the whole stream"
    else:
        return None
    return f"{how}; {_ENDS_TEXT[stream.policy]}" if stream is not None else how


def native_sharding(shard: NativeStreamShard, stream: StreamRun | None, drop_last: bool) -> ShardingInfo:
    """The ``ShardingInfo`` of a loader over a native (or self-split) share."""
    # NOTE: a dataset that splits itself reports its own share's length (LitData), which differs by rank,
    # and the state must be the same on every process.
    length = getattr(shard.dataset, "__len__", None) if shard.kind == NATIVE else None
    return ShardingInfo(
        mode="shard",
        num_processes=shard.num_processes,
        split_batches=shard.split_batches,
        even_batches=stream is None or stream.policy == PAD,
        drop_last=drop_last,
        batch_size=shard.batch_size,
        dataset_length=int(length()) if callable(length) else None,
        sampler=NATIVE_STREAM_KINDS[0] if shard.kind == NATIVE else NATIVE_STREAM_KINDS[1],
    )
