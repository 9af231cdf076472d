"""``BatchSamplerShard``: one process's share of a batch sampler, by whole batches or by slices."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from lightning_shard._checks import check_num_processes, check_process_index, check_split_batch_size
from lightning_shard.sampling.balance import EvenBatches, check_even_batches, chunk, is_balanced, tail_steps
from lightning_shard.sampling.fast_index import FastOrder, ShardLayout, fast_epoch_order
from lightning_shard.sampling.samplers import BatchSamplerWrapper, KnowsKind, forward_epoch, sampler_kind


class BatchSamplerShard(KnowsKind, BatchSamplerWrapper):
    """Shards ``batch_sampler`` so that process ``process_index`` of ``num_processes`` gets its batches.

    With ``split_batches=False`` process ``r`` gets global batches ``r, r + N, ...``; with
    ``split_batches=True`` it gets slice ``r`` of every batch. With ``even_batches=True`` every process
    yields the same number of full batches, the shortfall filled with indices from the start of the
    epoch; with ``even_batches=False`` nothing is repeated and the last batches may be short or missing.
    For a plain ``BatchSampler`` over a sequential or random sampler, only this process's indices are
    computed, vectorised (docs/DESIGN.md, "Fast index path"); the result equals the generic path's.

    Args:
        batch_sampler: the batch sampler to shard (any iterable of index lists).
        num_processes: the number of data-parallel processes ``N``.
        process_index: this process's index in ``[0, N)``.
        split_batches: split each batch across processes instead of dealing out whole batches.
        even_batches: ``True`` pads so that every process yields as many batches as the others;
            ``"balanced"`` splits the end of the epoch into real samples instead (``sampling/balance.py``;
            for a batch sampler that batches a sized sampler by ``batch_size``, else it pads).

    Raises:
        TypeError: if ``num_processes`` or ``process_index`` is not an integer.
        ValueError: if ``num_processes < 1``, ``process_index`` is outside ``[0, N)``, or, with
            ``split_batches=True``, the batch size is unknown or not a multiple of ``N``.
    """

    def __init__(
        self,
        batch_sampler: Any,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: EvenBatches = True,
    ) -> None:
        self.num_processes = check_num_processes(num_processes)
        self.process_index = check_process_index(process_index, self.num_processes)
        self.batch_sampler = batch_sampler
        self.split_batches = split_batches
        self.even_batches: EvenBatches = check_even_batches(even_batches)
        self.kind = sampler_kind(batch_sampler)
        """What ``batch_sampler`` is, decided here once (not seen through, as a wrapper's is: the batch sampler
        itself is sharded); the loader's sources and saved state read it."""
        if split_batches:
            check_split_batch_size(self.batch_size, self.num_processes, "batch sampler")
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Record ``epoch`` and forward it to the wrapped batch sampler and its sampler."""
        self.epoch = epoch
        forward_epoch(self.batch_sampler, epoch)

    def _layout(self) -> ShardLayout | None:
        """The arithmetic layout when the batch sizes follow from a sized sampler's length (``kind.counted``)."""
        if not self.kind.counted:
            return None
        return ShardLayout(
            length=len(self.kind.sampler),
            batch_size=self.batch_size,  # type: ignore[arg-type]
            num_processes=self.num_processes,
            process_index=self.process_index,
            split_batches=self.split_batches,
            even_batches=self.even_batches,
            drop_last=self.drop_last,
        )

    def __len__(self) -> int:
        return self.length_after(0)

    def length_after(self, consumed: int) -> int:
        """How many batches this process yields once ``consumed`` batches of the wrapped sampler are gone:
        by the layout where batch sizes follow from the sampler's length, else counting whole batches (a
        bucketing sampler's short batches are not known before they come)."""
        layout = self._layout()
        if layout is not None:
            return layout.skip(consumed * layout.batch_size).num_batches()
        total = max(len(self.batch_sampler) - consumed, 0)
        if self.split_batches:
            return total
        rounds, extra = divmod(total, self.num_processes)
        if extra == 0 or self.drop_last:
            return rounds
        return rounds + (bool(self.even_batches) or self.process_index < extra)

    def _samples_left(self, consumed: int) -> int | None:
        """Samples left once ``consumed`` batches are gone, when the short last batch is kept and the batch
        sizes follow from the sampler's length (``None``: dropped, or a bucketing sampler's)."""
        if self.drop_last or not self.kind.counted:
            return None
        return max(len(self.sampler) - consumed * self.batch_size, 0)  # type: ignore[operator]

    def short_last_batch(self, consumed: int) -> int:
        """Samples in the wrapped sampler's short last batch once ``consumed`` batches are gone: 0 when it is
        full or dropped, or when its size does not follow from the sampler's length (a bucketing sampler's)."""
        left = self._samples_left(consumed)
        return 0 if left is None else left % self.batch_size  # type: ignore[operator]

    def __iter__(self) -> Iterator[list[int]]:
        return self.iter_from(0)

    def iter_from(self, start: int, *, consumed: int = 0) -> Iterator[list[int]]:
        """Yield this process's batches from its batch number ``start`` on.

        ``consumed`` first drops that many batches of the wrapped sampler and shards the rest, as a
        run on another number of processes that already consumed them would (elastic resumption).
        """
        fast = fast_epoch_order(self.kind)
        layout = self._layout()
        if fast is not None and layout is not None:
            return self._iter_fast(layout, fast, start, consumed)
        source = itertools.islice(iter(self.batch_sampler), consumed, None)
        return itertools.islice(self._iter_generic(source, consumed), start, None)

    @staticmethod
    def _iter_fast(layout: ShardLayout, fast: FastOrder, start: int, consumed: int) -> Iterator[list[int]]:
        epoch = fast()
        order = next(epoch)
        offset = min(consumed * layout.batch_size, layout.length)
        yield from layout.skip(offset).iter_batches(lambda positions: order(positions + offset), start)
        next(epoch, None)

    def _iter_generic(self, source: Iterable[Any] | None = None, consumed: int = 0) -> Iterator[list[int]]:
        """The streaming path, for any batch sampler; ``source`` replaces the wrapped sampler's batches
        (what is left of them once ``consumed`` are gone). With a balanced tail, the steps before it are dealt
        as usual, then the rest of the batches is split into this process's chunk."""
        batches = iter(self.batch_sampler if source is None else source)
        before_tail = None  # NOTE: how many batches are dealt: all, but for a balanced tail.
        length = self._samples_left(consumed)
        if length is not None and is_balanced(self.even_batches, length, self.num_processes):
            assert self.batch_size is not None  # NOTE: `_samples_left` needs it.
            group = 1 if self.split_batches else self.num_processes
            before_tail = tail_steps(length, self.batch_size * group, self.num_processes)[0] * group
        deal = self._iter_split if self.split_batches else self._iter_whole
        yield from deal(itertools.islice(batches, before_tail))
        tail = [index for batch in batches for index in batch] if before_tail is not None else []
        if tail:
            lo, hi = chunk(len(tail), self.num_processes, self.process_index)
            yield tail[lo:hi]

    def _iter_split(self, batches: Iterable[Any]) -> Iterator[list[int]]:
        """Slice ``r`` of every batch; a short batch (a bucketing sampler's) is cut in parts of every sample
        once, unless it is the epoch's last (known one batch ahead), which is padded or cut as the reference does."""
        assert self.batch_size is not None  # NOTE: checked in __init__ for split_batches.
        n, r = self.num_processes, self.process_index
        lo, hi = self.batch_size // n * r, self.batch_size // n * (r + 1)
        first: list[int] | None = None
        for position, (batch, last) in enumerate(marked_last(batches)):
            first = list(batch) if first is None else first
            if len(batch) == self.batch_size:
                yield batch[lo:hi]
            elif last and not first:
                return  # NOTE: an empty first batch has nothing to pad with.
            elif last and self.even_batches and not self.drop_last:
                yield (list(batch) + _repeat_to(first, self.batch_size))[lo:hi]
            elif last and self.kind.plain:
                if not self.drop_last and len(batch) > lo:
                    yield batch[lo:hi]
            elif not last and len(batch) < n:
                raise ValueError(
                    f"`split_batches=True`: batch {position} of the epoch has {len(batch)} samples, fewer than the "
                    f"{n} processes, so some would get none and the step could not be taken together. Have the "
                    "batch sampler yield batches of at least as many samples as processes (e.g. merge a bucket's "
                    "short last batch into the next), or use `split_batches=False`."
                )
            elif len(batch) > r:
                # NOTE: a short batch before the last, or a bucketing sampler's last: every sample once.
                yield list(batch[slice(*chunk(len(batch), n, r))])

    def _iter_whole(self, batches: Iterable[Any]) -> Iterator[list[int]]:
        """Batch ``r`` of every round of ``N``, as it comes (short or not, a bucketing sampler's), but for the
        epoch's last round (known one batch ahead), which is padded: the ranks from its last batch (if short) on
        get that batch continued into the start of the epoch (whole batches when sizes vary)."""
        n, r, size = self.num_processes, self.process_index, self.batch_size
        this_round: list[Any] = []
        head = this_round  # NOTE: the epoch's first round, what padding takes from (each next round is a new list).
        for batch, last in marked_last(batches):
            this_round.append(batch)
            if len(this_round) == n and not last:
                yield this_round[r]
                this_round = []
        if not this_round:
            return
        full = size is None or len(this_round[-1]) == size
        if len(this_round) == n and (self.drop_last or full):  # NOTE: a whole last round
            yield this_round[r]
            return
        # NOTE: the first batches must hold something to pad with (whole batches count when sizes vary).
        if self.drop_last or not (size is None or any(len(part) for part in head)):
            return
        # NOTE: the first rank padded: only the epoch's last batch is completed (a short one before it is yielded).
        start = len(this_round) - (not full)
        if r < start or not self.even_batches:
            if r < len(this_round) and this_round[r]:
                yield this_round[r]
        elif size is None:
            yield _repeat_to(head, n)[r - start]
        else:
            indices = [index for batch in head for index in batch]
            pool = ([] if full else list(this_round[-1])) + _repeat_to(indices, n * size)
            yield pool[(r - start) * size : (r - start + 1) * size]


def marked_last(
    items: Iterable[Any], move: Callable[[Any], Any] | None = None
) -> Generator[tuple[Any, bool], None, None]:
    """Each of ``items`` (``move``d, if given, before the next is read) with whether it is the last, read one
    ahead (the loaders' sources mark an epoch's batches so: map-style data ends where arithmetic says, on every
    process alike, with no collective)."""
    iterator = iter(items)
    current = next(iterator, _END)
    while current is not _END:
        if move is not None:
            current = move(current)
        following = next(iterator, _END)
        yield current, following is _END
        current = following


_END = object()


def _repeat_to(items: list[Any], length: int) -> list[Any]:
    """``items`` repeated over and over, cut at ``length`` entries (what padding takes from)."""
    return list(itertools.islice(itertools.cycle(items), length))
