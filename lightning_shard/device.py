"""Device placement of nested batches: tensors move, everything else passes through."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def send_to_device(batch: Any, device: torch.device | str | None, non_blocking: bool = False) -> Any:
    """Return ``batch`` with every tensor (and object with a ``to`` method) moved to ``device``.

    Dicts, lists, tuples and namedtuples keep their type; other leaves are returned unchanged.
    ``device=None`` returns ``batch`` itself.
    """
    if device is None:
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if _is_namedtuple(batch):
        return type(batch)(*(send_to_device(item, device, non_blocking) for item in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(send_to_device(item, device, non_blocking) for item in batch)
    if isinstance(batch, Mapping):
        moved = {key: send_to_device(value, device, non_blocking) for key, value in batch.items()}
        try:
            return type(batch)(moved)  # type: ignore[call-arg]
        except TypeError:
            return moved
    if callable(getattr(batch, "to", None)) and not isinstance(batch, type):
        try:
            return batch.to(device, non_blocking=non_blocking)
        except TypeError:
            return batch.to(device)
    return batch
