"""What the processes reading alike must agree on: how a stream's processes learn that their shares ended
(``Agreement``, ``Share``), and whether a strided stream's read the same stream (``SameStreamCheck``;
docs/DESIGN.md, "Streaming data", "Streams that split themselves"); and the random draws of the main process's
fetches, kept apart from the model's: each fetch runs with torch's CPU generator seeded from ``(epoch seed,
epoch, process, step)`` and restored after (``isolated_fetches``; "Random states on resume")."""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset, default_collate, default_convert

from lightning_shard.comm.collectives import communication_device
from lightning_shard.comm.tree import map_leaves
from lightning_shard.loaders.position import Position
from lightning_shard.sampling.permutation import splitmix64
from lightning_shard.sampling.stream_fingerprint import DIGEST_BITS, Fingerprint, Fingerprinted

END = object()
"""What ``Share.fetch`` returns once the real pass is over."""


class SameStreamCheck:
    """Whether a strided stream's processes read the same stream: each fetched batch is unwrapped of the
    ``Fingerprinted`` mark a compared global batch carries, its digest rides on that fetch's agreement, and
    every process raises if the digests of a step differ (docs/DESIGN.md, "Streams that split themselves").
    Without ``in_order`` (batches may arrive in another order on each process) the digests are summed and
    compared once, at the fetch where every process's stream ended."""

    def __init__(self, shard: Any, *, pin: bool, in_order: bool) -> None:
        """``shard``: this process's ``IterableDatasetShard`` of the stream."""
        self.shard = shard
        self.pin = pin and torch.cuda.is_available()
        self.in_order = in_order
        self.seen: Fingerprint | None = None
        """The last fingerprint this process compared (shown in a refusal)."""
        self._summed = 0

    def unwrap(self, batch: Any) -> tuple[Any, int]:
        """``batch`` without its mark, and the digest to compare at this fetch (0: none)."""
        if type(batch) is not Fingerprinted:
            return batch, 0 if self.in_order or batch is not END else self._summed + 1
        self.seen, value = batch.fingerprint, batch.value
        if self.pin:
            value = map_leaves(
                lambda leaf: leaf.pin_memory() if isinstance(leaf, torch.Tensor) else leaf, value
            )
        if self.in_order:
            return value, batch.fingerprint.digest
        self._summed = (self._summed + batch.fingerprint.digest) % (1 << DIGEST_BITS)
        return value, 0

    def verify(self, sums: tuple[int, ...], step: int) -> None:
        """Raise on every process if the digests of the fetch for ``step`` (``sums``: ended, empty, the digests'
        sum and their squares' over the group) differ; one ended share leaves the step unjudged in order (its
        slice of a last, short global batch may be empty), every share not ended out of order."""
        ended, _, total, squares = sums
        world = dist.get_world_size()
        if ended == (0 if self.in_order else world) and world * squares != total * total:
            raise RuntimeError(self._message(step))

    def _message(self, step: int) -> str:
        name, n = type(self.shard.dataset).__name__, self.shard.num_processes
        where = "first global batch" if step == 0 else f"global batch {step} (counted from 0)"
        if not self.in_order:
            where = (
                "epoch (compared at its end: the loader's `in_order=False` lets batches arrive in any order)"
            )
        shown = "nothing" if self.seen is None else ", ".join(self.seen.shown)
        compared = (
            "their whole contents" if self.seen is None or self.seen.by_content else "their identifying keys"
        )
        return (
            f"lightning_shard: the processes read different elements from the iterable dataset `{name}` in {where}, "
            f"so it does not yield the same stream on every process, which striding needs: each process keeps 1/{n} of "
            f"what it reads, and the rest would never be trained. This process ({self.shard.process_index} of {n}) read: "
            f"{shown} ({compared} compared). Two ways out, depending on what `{name}` does:\n"
            f"- it splits itself by rank (a `torch.distributed.get_rank()` in its `__iter__`, a node splitter): declare "
            f"`splits_by_rank = True` on it, and each process reads its own part as it is (declared on a stream that "
            f"is the same on every process, every sample would be trained {n} times);\n"
            "- every process reads the same stream, but its elements differ by random draws the package cannot make "
            "the same on every process (a generator of its own, Python's `random` or NumPy's in the main process; "
            "torch's global generator is made the same, and so are DataLoader workers' seeds): give each element an "
            f"identifying key (`id`, `__key__`), which is then compared instead, or declare `splits_by_rank = False` "
            f"on `{name}` to skip this check (declared on a stream that does split itself, "
            f"{n - 1} of every {n} samples would never be trained)."
        )


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
        if ended is not None and 0 < ended < skip:
            # NOTE: an end recorded by a state of 0.2 / 0.3: that first pass is already padding.
            self.end = ended
            self.iterator = itertools.islice(first, (skip - ended) % ended, None)
        # NOTE: else the `skip` batches are read again, which finds where a share that ends before them ends
        # (an empty one ends at its first fetch, as in a fresh epoch).
        self.position = skip if self.end is not None else sum(1 for _ in itertools.islice(first, skip))
        """Real batches fetched from the share (those skipped included)."""
        if 0 < self.position < skip:
            self.end = self.position
            self.iterator = itertools.islice(restart(), (skip - self.position) % self.position, None)

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


class Agreement:
    """One asynchronous all-reduce (a sum over the group) of the integers a fetch's check sends, settled before
    that batch is yielded: how many ranks' shares have ended, and how many of those were empty; for a strided
    stream two more, the fetched batch's digest and its square (``SameStreamCheck``). The epoch's report is
    summed with it too (``StreamRun``)."""

    def __init__(self) -> None:
        self._pending: tuple[torch.Tensor, Any] | None = None
        self._sums: tuple[int, ...] = ()
        self.sent = 0
        """Bytes this process all-reduced so far."""

    def start(self, *values: int) -> None:
        """Start summing ``values`` over the group."""
        flags = torch.tensor(values, dtype=torch.int64, device=communication_device())
        self.sent += flags.numel() * flags.element_size()
        self._pending = (flags, dist.all_reduce(flags, async_op=True))

    def settle(self) -> tuple[int, ...]:
        """The sums of the values started last, waited for once: settled again before the next ``start``, the
        same sums (the first two batches are compared before the first is yielded; an epoch left early
        settles the check every process started, so no collective of ours is in flight when the group goes
        down)."""
        if self._pending is not None:
            flags, work = self._pending
            self._pending = None
            work.wait()
            self._sums = tuple(int(value) for value in flags.tolist())
        return self._sums


_MASK = (1 << 63) - 1
_DRAW_FREE_DATASETS = (TensorDataset, range, list, tuple, torch.Tensor)
"""Dataset types whose ``__getitem__`` draws nothing."""
_DRAW_FREE_COLLATES = (default_collate, default_convert)


def fetches_may_draw(dataset: object, collate_fn: object) -> bool:
    """Whether fetching from ``dataset`` and collating with ``collate_fn`` may draw random numbers (torch's own
    draw nothing, so a loader of only those skips the few microseconds of keeping each fetch apart)."""
    return not (isinstance(dataset, _DRAW_FREE_DATASETS) and collate_fn in _DRAW_FREE_COLLATES)


def epoch_seed(generator_state: str | None, fallback: int) -> int:
    """The seed of an epoch's fetch draws: a hash of the loader's generator state at the epoch's start (saved
    with the position, and agreed wherever the processes' orders are), else ``fallback``."""
    if generator_state is None:
        return fallback & _MASK
    digest = hashlib.blake2b(generator_state.encode("ascii"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _MASK


def fetch_seed(seed: int, epoch: int, process_index: int, step: int) -> int:
    """A seed for fetch ``step`` of ``epoch`` on ``process_index``: distinct inputs, unrelated seeds."""
    value = seed & _MASK
    for part in (epoch, process_index, step):
        value = splitmix64(value ^ (part + 0x9E3779B97F4A7C15)) & _MASK
    return value


def isolated_fetches(
    make: Callable[[], Iterator[Any]],
    start: Position,
    draw_seed: int,
    process_index: int,
    each_fetch: bool,
    when: Callable[[int], bool] | None = None,
) -> Iterator[Any]:
    """Iterate ``make()``: creating it, and each fetch if ``each_fetch`` (those of the steps ``when`` picks, if
    given), with torch's CPU generator seeded with ``fetch_seed`` of the epoch ``start`` begins (its
    ``epoch_seed``, from ``draw_seed`` without a generator state), ``process_index`` and the step (counted from
    ``start.start``), and the caller's state restored after."""
    seed = epoch_seed(start.generator_state, draw_seed)
    key = functools.partial(fetch_seed, seed, start.epoch or 0, process_index)
    source = _seeded(make, key(-1))
    if not each_fetch:
        yield from source
        return
    for step in itertools.count(start.start):
        try:
            batch = _seeded(source.__next__, key(step)) if when is None or when(step) else next(source)
        except StopIteration:
            return
        yield batch


def _seeded(call: Callable[[], Any], seed: int) -> Any:
    """``call()`` with torch's CPU generator seeded with ``seed``, the caller's state restored after."""
    outer = torch.get_rng_state()
    torch.default_generator.manual_seed(seed)
    try:
        return call()
    finally:
        torch.set_rng_state(outer)
