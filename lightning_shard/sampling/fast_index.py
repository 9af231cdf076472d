"""Vectorised index path (docs/DESIGN.md, "Fast index path"): one process's batches by arithmetic on the epoch's order.

The global batches are consecutive slices of the order (a tensor, the identity, or a ``KeyedPermutation``),
so a process's batches are the order at a strided grid of positions, evaluated there only, plus at most one
tail batch padded from the epoch's start (its first global batch), cycled as often as needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import SequentialSampler

from lightning_shard.sampling.balance import EvenBatches, chunk, is_balanced, tail_steps
from lightning_shard.sampling.own_sampler import own_generator
from lightning_shard.sampling.samplers import _CHUNK_POSITIONS, ScalableRandomSampler, SeedableRandomSampler

if TYPE_CHECKING:
    from lightning_shard.sampling.samplers import SamplerKind

Order = Callable[[torch.Tensor], torch.Tensor]
"""An epoch's order, evaluated at positions (``int64``): a tensor's indexing, a ``KeyedPermutation``'s ``at``, or
the identity."""


@dataclass(frozen=True)
class ShardLayout:
    """How one process cuts an epoch of ``length`` indices into its batches."""

    length: int
    batch_size: int
    num_processes: int
    process_index: int
    split_batches: bool
    even_batches: EvenBatches
    drop_last: bool

    def skip(self, offset: int) -> ShardLayout:
        """The layout of the same epoch once its first ``offset`` indices are gone."""
        return replace(self, length=max(self.length - offset, 0))

    @property
    def span(self) -> int:
        """Samples per step over all processes: the global batch."""
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    @property
    def balanced(self) -> bool:
        """Whether the epoch ends in a balanced tail (``even_batches="balanced"``, enough samples)."""
        return not self.drop_last and is_balanced(self.even_batches, self.length, self.num_processes)

    def row_geometry(self) -> tuple[int, int, int, int]:
        """``(rows, first, stride, width)``: row ``k`` of the unpadded batches is
        ``order[first + k * stride : first + k * stride + width]``."""
        n, b, r = self.num_processes, self.batch_size, self.process_index
        full = self.length // b
        if self.balanced:
            full = tail_steps(self.length, self.span, n)[0] * (1 if self.split_batches else n)
        if self.split_batches:
            return full, r * (b // n), b, b // n
        return full // n, r * b, n * b, b

    def tail_span(self) -> tuple[int, int] | None:
        """Positions ``[start, stop)`` in the padded epoch of this process's last batch, if any: the row after
        its unpadded ones, or its chunk of a balanced tail."""
        if self.balanced:
            steps, tail = tail_steps(self.length, self.span, self.num_processes)
            if not tail:
                return None
            lo, hi = chunk(tail, self.num_processes, self.process_index)
            return steps * self.span + lo, steps * self.span + hi
        if self.drop_last or self.length % self.span == 0:
            return None
        rows, first, stride, width = self.row_geometry()
        start = rows * stride + first
        stop = start + width if self.even_batches else min(start + width, self.length)
        return (start, stop) if start < stop else None

    def num_batches(self) -> int:
        """Exactly how many batches this process yields in the epoch."""
        return self.row_geometry()[0] + (self.tail_span() is not None)

    def iter_batches(self, order: Order, start: int = 0) -> Iterator[list[int]]:
        """Yield this process's batches from batch ``start`` on, as lists of ints, from ``order`` evaluated at
        their positions only (from this layout's position 0), a chunk of rows at a time."""
        rows, first, stride, width = self.row_geometry()
        columns = torch.arange(first, first + width, dtype=torch.int64)
        chunk_rows = max(_CHUNK_POSITIONS // max(width, 1), 1)
        for begin in range(start, rows, chunk_rows):
            row_starts = torch.arange(begin, min(begin + chunk_rows, rows), dtype=torch.int64) * stride
            yield from order(row_starts[:, None] + columns).tolist()
        tail = self.tail_span()
        if tail is not None and start <= rows:
            # NOTE: positions past the epoch's end continue into its start (its first global batch), cycled.
            head = min(self.span, self.length)
            positions = [p if p < self.length else (p - self.length) % head for p in range(*tail)]
            yield order(torch.tensor(positions, dtype=torch.int64)).tolist()


FastOrder = Callable[[], Iterator[Order]]
"""An epoch on the fast path: the iterator yields the epoch's order, then, once resumed at the epoch's end,
leaves the sampler's generator where the sampler's own iteration would."""


def _random_epoch(sampler: Any, seedable: bool) -> Iterator[Order]:
    """Draw exactly what ``RandomSampler.__iter__`` draws, from the same generator state; at the epoch's end,
    advance a visible generator as it does after its last index (a discarded draw)."""
    generator = sampler.reseed() if seedable else sampler.generator or own_generator()
    yield torch.randperm(len(sampler.data_source), generator=generator).__getitem__
    if sampler.generator is not None and not (seedable and sampler.owns_generator):
        torch.randperm(len(sampler.data_source), generator=sampler.generator)


def _identity(positions: torch.Tensor) -> torch.Tensor:
    return positions


def fast_epoch_order(kind: SamplerKind) -> FastOrder | None:
    """The fast path for a batch sampler of ``kind``, or ``None`` when only the generic path is exact."""
    sampler: Any = kind.sampler
    if not kind.exact or kind.known is None:
        return None
    if kind.known is ScalableRandomSampler:
        return lambda: iter([sampler.order().at])
    if kind.known is SequentialSampler:
        return lambda: iter([_identity])  # NOTE: the identity order needs no tensor.
    if sampler.replacement or sampler.num_samples != len(sampler.data_source):
        return None
    return partial(_random_epoch, sampler, kind.known is SeedableRandomSampler)
