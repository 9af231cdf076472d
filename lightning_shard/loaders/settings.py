"""What a loader keeps of the user's ``DataLoader`` settings, and what its state records of them."""

from __future__ import annotations

import inspect
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from lightning_shard.sampling.native_stream import STRIDED_STREAM

_REBUILT_BY_US = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")


def loader_settings(dataloader: DataLoader) -> dict[str, Any]:
    """The user's ``DataLoader`` settings we keep as they are (workers, collate, pinning, ...)."""
    parameters = inspect.signature(DataLoader.__init__).parameters
    return {
        name: getattr(dataloader, name, parameter.default)
        for name, parameter in parameters.items()
        if name != "self" and name not in _REBUILT_BY_US and parameter.kind is parameter.POSITIONAL_OR_KEYWORD
    }


def sampler_kind(sampler: Any, dataset: Any) -> str:
    """The kind of index source recorded in the state: the index sampler's class, or ``"iterable"``."""
    if sampler is None:
        # NOTE: `IterableDataset` inherits a `__getitem__` that raises from `Dataset`.
        streamed = isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__")
        return STRIDED_STREAM if streamed else "none"
    return type(sampler).__name__
