"""The contract of a batch sampler that can start anywhere in its epoch by arithmetic.

``BatchSamplerShard`` implements it; ``EpochCursor`` and ``SkipBatchSampler`` use it when the batch
sampler they wrap does, and otherwise walk the wrapped sampler's batches of indices (never the data).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable


@runtime_checkable
class SeekableBatchSampler(Protocol):
    """A batch sampler that yields its epoch from any batch on, also after an elastic restore."""

    def iter_from(self, start: int, *, consumed: int = 0) -> Iterator[list[int]]:
        """This process's batches from its batch ``start`` on, once ``consumed`` batches of the wrapped
        (unsharded) batch sampler are gone."""
        ...

    def length_after(self, consumed: int) -> int:
        """How many batches this process yields once ``consumed`` batches of the wrapped sampler are gone."""
        ...
