"""Datasets the benchmarks share (benchmarks import nothing from ``tests/``)."""

from __future__ import annotations

from torch.utils.data import Dataset


class Indices(Dataset):
    """Sample ``i`` is ``i``: a dataset of any length that costs nothing to hold or load, so only the
    sharding is measured."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        return index
