"""How a stream's processes learn that their shares ended (``Agreement``, ``Share``), and whether a strided
stream's read the same first elements (docs/DESIGN.md, "Streaming data", "Streams that split themselves")."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterator
from typing import Any

import torch
import torch.distributed as dist

from lightning_shard.comm.collectives import all_gather_objects, communication_device
from lightning_shard.comm.tree import map_leaves
from lightning_shard.sampling.iterable_shard import IterableDatasetShard
from lightning_shard.sampling.stream_fingerprint import Fingerprint, Fingerprinted

END = object()
"""What ``Share.fetch`` returns once the real pass is over."""


def all_ended(count: int, ended_here: bool, step: int) -> bool:
    """``"same"``: whether the stream ended on all ``count`` processes; raises on all if only some."""
    world = dist.get_world_size()
    if 0 < count < world:
        ended_on = [rank for rank, done in enumerate(all_gather_objects(ended_here)) if done]
        raise RuntimeError(
            f"The iterable dataset ran out on processes {ended_on} of {world} after {step} batches, "
            "but not on the others: it yields different elements on different processes. Every process "
            "reads the whole stream and keeps its own slice, so make the dataset yield the same stream "
            "on every process (do not split it by rank yourself), or shard it yourself and use a plain "
            "`DataLoader` without `prepare_data_loader`."
        )
    return count > 0


_UNKNOWN = (-1, -(2**62) - 1)
"""What a process that read no element sends: below every digest, so the others decide."""


def check_same_stream(seen: Fingerprint | None, dataset: Any, num_processes: int, process_index: int) -> None:
    """Raise on every process unless every process that read elements read the same first global batch (one
    all-reduce, a maximum, of the largest digest, the negated smallest, and whether any was of whole contents)."""
    sent = _UNKNOWN if seen is None else (seen.digest, -seen.digest)
    values = torch.tensor([*sent, int(seen is not None and seen.by_content)], device=communication_device())
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    largest, smallest, by_content = int(values[0]), -int(values[1]), bool(values[2])
    if largest < 0 or largest == smallest:
        return
    name = type(dataset).__name__
    shown = "nothing" if seen is None else ", ".join(seen.shown)
    message = (
        f"lightning_shard: the processes read different first elements from the iterable dataset `{name}`, so it "
        f"does not yield the same stream on every process, which striding needs: each process would keep "
        f"1/{num_processes} of what it reads, and the rest would never be seen. This process ({process_index} of "
        f"{num_processes}) read first: {shown}. If `{name}` splits itself by rank (a "
        "`torch.distributed.get_rank()` in its `__iter__`, webdataset's `split_by_node`, ...), declare "
        f"`splits_by_rank = True` on it: each process then reads its own share as it is. Otherwise make it "
        "yield the same elements on every process."
    )
    if by_content:
        message += (
            " Nothing in its elements names them (no `__key__` or `id` key, no integer or string field), so "
            "their whole contents were compared: if every process does read the same stream and its elements "
            f"are random (augmentation drawn in `__iter__`), declare `splits_by_rank = False` on `{name}` to "
            "skip this check."
        )
    raise RuntimeError(message)


def checked_first(
    batches: Iterator[Any],
    shard: IterableDatasetShard,
    *,
    compare: bool,
    pin: bool,
    in_order: bool,
) -> Generator[Any, None, None]:
    """``batches`` of ``shard`` once every process read the same first elements (checked at the first fetch when
    ``compare``), each ``Fingerprinted`` wrapper taken off: the first batch's only, unless not ``in_order``."""
    first = next(batches, END)
    seen = None
    if type(first) is Fingerprinted:
        seen, first = first.fingerprint, first.value
        if pin and torch.cuda.is_available():
            first = map_leaves(
                lambda leaf: leaf.pin_memory() if isinstance(leaf, torch.Tensor) else leaf, first
            )
    if compare:
        check_same_stream(seen, shard.dataset, shard.num_processes, shard.process_index)
    if first is END:
        return
    yield first
    if in_order:
        yield from batches
    else:
        yield from (batch.value if type(batch) is Fingerprinted else batch for batch in batches)


class Share:
    """This process's batches: the real pass over its share, then passes from its start (padding). ``end`` is
    how many real batches the share holds, once known; resumed at batch ``skip`` after its end (recorded as
    ``ended``, or found reading again), it continues ``(skip - end) % end`` batches into its padding."""

    def __init__(
        self, first: Iterator[Any], restart: Callable[[], Iterator[Any]], skip: int, ended: int | None
    ) -> None:
        self.restart = restart
        self.iterator: Iterator[Any] = first
        self.end: int | None = None
        self.position = skip
        """Real batches fetched from the share (those skipped included)."""
        if ended is not None and 0 < ended < skip:
            # NOTE: an end recorded by a state of 0.2 / 0.3: that first pass is already padding.
            self.end = ended
            self.iterator = itertools.islice(first, (skip - ended) % ended, None)
            return
        read = sum(1 for _ in itertools.islice(first, skip))
        if read < skip and read:
            self.end = read
            self.iterator = itertools.islice(restart(), (skip - read) % read, None)
        elif read < skip:
            self.position = 0  # NOTE: an empty share ends at its first fetch, as in a fresh epoch

    @property
    def exhausted(self) -> bool:
        """Whether the real pass is over (the share yields padding now)."""
        return self.end is not None

    def fetch(self) -> Any:
        """The next batch, or ``END`` when the real pass ends (then ``exhausted``)."""
        if self.end is not None:
            return self.padding()
        batch = next(self.iterator, END)
        if batch is END:
            self.end = self.position
        else:
            self.position += 1
        return batch

    def padding(self) -> Any:
        """The next batch of a pass from the start of the share, restarting it when it ends."""
        batch = next(self.iterator, END)
        if batch is END:
            self.iterator = self.restart()
            batch = next(self.iterator, END)
        if batch is END:
            raise RuntimeError("This process's share of the stream yields nothing, so it cannot be padded.")
        return batch

    def rest(self) -> Iterator[Any]:
        """What is left of the real pass (nothing once it ended)."""
        return iter(()) if self.exhausted else self.iterator


class Agreement:
    """One asynchronous all-reduce (a sum over the group) of two integers per fetch, settled before that batch
    is yielded: how many ranks' shares have ended, and how many of those were empty."""

    def __init__(self) -> None:
        self._pending: tuple[torch.Tensor, Any] | None = None
        self.sent = 0
        """Bytes this process all-reduced in its checks so far."""

    def start(self, ended: bool, empty: bool) -> None:
        flags = torch.tensor([int(ended), int(empty)], dtype=torch.int64, device=communication_device())
        self.sent += flags.numel() * flags.element_size()
        self._pending = (flags, dist.all_reduce(flags, async_op=True))

    def drain(self) -> None:
        """Wait for a started check whose answer is no longer needed."""
        if self._pending is not None:
            self._pending[1].wait()
            self._pending = None

    def settle(self) -> tuple[int, int]:
        """The sums over the group's ranks: ended shares, empty ones."""
        assert self._pending is not None  # NOTE: each settle follows its start in `StreamRun.batches`.
        flags, work = self._pending
        self._pending = None
        work.wait()
        ended, empty = flags.tolist()
        return int(ended), int(empty)
