"""Small datasets the tests share."""

from __future__ import annotations

from torch.utils.data import Dataset


class Indexed(Dataset):
    """A map-style dataset whose sample ``i`` is ``i``, so what a loader yields names the samples."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        return index
