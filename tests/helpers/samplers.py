"""Samplers users write themselves (issue: "the user's own sampler"), shared by the regression fits and the
combination harness: length bucketing with short batches mid-epoch, max-tokens batches without a
``batch_size``, a filtering ``RandomSampler`` subclass, and a sampler drawing from the global RNG."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import torch
from torch.utils.data import BatchSampler, RandomSampler, Sampler


class Buckets(BatchSampler):
    """Length bucketing: ids in buckets of ``bucket`` consecutive ids, each batched by ``batch_size`` (its
    last batch short, mid-epoch), the buckets' order shuffled with Python's global ``random``."""

    def __init__(self, length: int, batch_size: int, bucket: int) -> None:
        self.length, self.batch_size, self.bucket, self.drop_last = length, batch_size, bucket, False

    def _buckets(self) -> list[list[int]]:
        return [
            list(range(start, min(start + self.bucket, self.length)))
            for start in range(0, self.length, self.bucket)
        ]

    def __iter__(self) -> Iterator[list[int]]:
        buckets = self._buckets()
        random.shuffle(buckets)
        for bucket in buckets:
            for start in range(0, len(bucket), self.batch_size):
                yield bucket[start : start + self.batch_size]

    def __len__(self) -> int:
        return sum(math.ceil(len(bucket) / self.batch_size) for bucket in self._buckets())


class MaxTokens:
    """Batches of varying size and no ``batch_size``, as a max-tokens sampler packs them: the ids cut into
    consecutive runs of 3, 5, 2, 4, ... ids, the runs' order drawn with ``torch.randperm`` (global RNG)."""

    SIZES = (3, 5, 2, 4)

    def __init__(self, length: int) -> None:
        self.runs: list[list[int]] = []
        start = 0
        while start < length:
            size = self.SIZES[len(self.runs) % len(self.SIZES)]
            self.runs.append(list(range(start, min(start + size, length))))
            start += size

    def __iter__(self) -> Iterator[list[int]]:
        return (self.runs[index] for index in torch.randperm(len(self.runs)).tolist())

    def __len__(self) -> int:
        return len(self.runs)


class Evens(RandomSampler):
    """A filtering ``RandomSampler`` subclass: only the even ids of its random order."""

    def __iter__(self) -> Iterator[int]:
        return (index for index in super().__iter__() if index % 2 == 0)

    def __len__(self) -> int:
        return (len(self.data_source) + 1) // 2  # type: ignore[arg-type]


class GlobalPermutation(Sampler[int]):
    """A user's sampler drawing its order from the global RNG: ``torch.randperm(n)`` without a generator."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Iterator[int]:
        return iter(torch.randperm(self.length).tolist())

    def __len__(self) -> int:
        return self.length
