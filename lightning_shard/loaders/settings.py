"""What a loader keeps of the user's ``DataLoader`` settings."""

from __future__ import annotations

import inspect
from typing import Any

from torch.utils.data import DataLoader

_REBUILT_BY_US = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")


def loader_settings(dataloader: DataLoader) -> dict[str, Any]:
    """The user's ``DataLoader`` settings we keep as they are (workers, collate, pinning, ...)."""
    parameters = inspect.signature(DataLoader.__init__).parameters
    return {
        name: getattr(dataloader, name, parameter.default)
        for name, parameter in parameters.items()
        if name != "self" and name not in _REBUILT_BY_US and parameter.kind is parameter.POSITIONAL_OR_KEYWORD
    }
