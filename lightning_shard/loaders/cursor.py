"""``EpochCursor``: the loader's index source, able to start anywhere in the epoch by arithmetic."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lightning_shard.sampling.samplers import BatchSamplerWrapper

IndexObserver = Callable[[Iterator[Any]], Iterator[Any]]
"""Wraps one iteration's batches of indices, yielding them on (``ShardAuditCallback``'s ``IndexTap``)."""


class EpochCursor(BatchSamplerWrapper):
    """Wraps a (sharded) batch sampler; the next iteration (only) starts at this process's batch ``start``
    after ``consumed`` batches of the user's batch sampler (an elastic restore), both set by ``rewind`` just
    before the loader creates its iterator and taken by that iteration, so no skipped sample is loaded (a
    sampler that is not a ``SeekableBatchSampler`` is walked, indices only) and the iterations after it,
    and ``len()``, are whole epochs again."""

    def __init__(self, batch_sampler: Any) -> None:
        super().__init__(batch_sampler)
        self.start = 0
        self.consumed = 0
        self.observer: IndexObserver | None = None
        """Wraps each iteration's batches of indices when set (``ShardAuditCallback`` records them)."""

    def rewind(self, start: int = 0, consumed: int = 0) -> None:
        """Make the next iteration start at ``start`` after ``consumed`` (both 0: the epoch's start)."""
        self.start, self.consumed = start, consumed

    def __iter__(self) -> Iterator[Any]:
        batches = self._batches()
        return batches if self.observer is None else self.observer(batches)

    def _batches(self) -> Iterator[Any]:
        # NOTE: taken at the first batch, not at `iter()`: a DataLoader with workers calls `iter()` twice on its
        # first iteration and uses the second.
        start, consumed, self.start, self.consumed = self.start, self.consumed, 0, 0
        yield from self.batches_from(start, consumed)

    def length_after(self, consumed: int) -> int:
        """This process's batches in an epoch once ``consumed`` batches of the user's sampler are gone."""
        if self.seekable:
            return int(self.batch_sampler.length_after(consumed))
        return max(len(self.batch_sampler) - consumed, 0)

    def __len__(self) -> int:
        return self.length_after(self.consumed)
