"""The datasets the tests share. Naming: ``<what a sample holds><Map | Stream>`` (map-style or iterable).

Every dataset is module-level (spawned processes and DataLoader workers pickle it) and says which
sample it holds, so what a loader yields names the samples.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Dataset, IterableDataset


class IdMap(Dataset):
    """Sample ``i`` is ``i``; sample ``bad`` raises, as a corrupt file would."""

    def __init__(self, length: int, bad: int | None = None) -> None:
        self.length, self.bad = length, bad

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        if index == self.bad:
            raise OSError(f"sample {index} is corrupt")
        return index


class IdStream(IterableDataset):
    """The ids ``0 .. length - 1`` (or the given ``ids``) in order; id ``bad`` raises; sized unless told."""

    def __init__(self, ids: int | Sequence[int], bad: int | None = None, sized: bool = True) -> None:
        self.ids = list(range(ids)) if isinstance(ids, int) else list(ids)
        self.bad, self.sized = bad, sized

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("this stream has no length")
        return len(self.ids)

    def __iter__(self) -> Iterator[int]:
        for index in self.ids:
            if index == self.bad:
                raise OSError(f"element {index} is corrupt")
            yield index


class ShuffledIdStream(IterableDataset):
    """The ids ``0 .. length - 1``, shuffled by its ``generator`` when ``shuffle`` (the shard re-seeds it)."""

    def __init__(self, length: int, shuffle: bool) -> None:
        self.length = length
        self.generator = torch.Generator() if shuffle else None

    def __iter__(self) -> Iterator[int]:
        if self.generator is None:
            return iter(range(self.length))
        return iter(torch.randperm(self.length, generator=self.generator).tolist())
