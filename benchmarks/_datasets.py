"""Datasets the benchmarks share (benchmarks import nothing from ``tests/``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Indices(Dataset):
    """Sample ``i`` is ``i``: a dataset of any length that costs nothing to hold or load, so only the
    sharding is measured."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        return index


def rows(samples: int) -> TensorDataset:
    """Sample ``i`` is 8 times the float ``i`` (row ``i`` says which sample it is)."""
    return TensorDataset(torch.arange(samples, dtype=torch.float32).view(-1, 1).expand(-1, 8).contiguous())


def shuffled_rows(dataset: TensorDataset, batch_size: int) -> Callable[[], DataLoader]:
    """A user's shuffled loader over ``dataset``, the same order every time it is built."""

    def user() -> DataLoader:
        generator = torch.Generator().manual_seed(0)
        return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator)

    return user
