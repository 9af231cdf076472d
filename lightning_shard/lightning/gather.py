"""``gather_for_metrics``: every process's outputs in process order, without the padding (SPEC D7)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from lightning_shard.distributed import all_gather_objects, is_distributed


def gather_in_process_order(data: Any) -> Any:
    """``data`` of every process, concatenated along the first dimension in process order.

    Tensors (also nested in dicts, lists and tuples) may differ in their first dimension across
    processes; anything else is gathered as objects (a list is concatenated, other values listed).
    """
    if not is_distributed() or dist.get_world_size() == 1:
        return data
    if _is_tensor_tree(data):
        return _map_tensors(_gather_tensor, data)
    gathered = all_gather_objects(data)
    if isinstance(data, (list, tuple)):
        return [item for part in gathered for item in part]
    return gathered


def keep_first(data: Any, count: int) -> Any:
    """The first ``count`` samples of gathered ``data`` (tensors along dimension 0, or a list)."""
    if _is_tensor_tree(data):
        return _map_tensors(lambda tensor: tensor[:count], data)
    return data[:count]


def _is_tensor_tree(data: Any) -> bool:
    if isinstance(data, Tensor):
        return True
    if isinstance(data, Mapping):
        return bool(data) and all(_is_tensor_tree(value) for value in data.values())
    if isinstance(data, (list, tuple)):
        return bool(data) and all(_is_tensor_tree(value) for value in data)
    return False


def _map_tensors(fn: Callable[[Tensor], Tensor], data: Any) -> Any:
    if isinstance(data, Tensor):
        return fn(data)
    if isinstance(data, Mapping):
        return type(data)({key: _map_tensors(fn, value) for key, value in data.items()})  # type: ignore[call-arg]
    items = [_map_tensors(fn, value) for value in data]
    return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)


def _gather_tensor(tensor: Tensor) -> Tensor:
    """``tensor`` of every process, concatenated along dimension 0 (a scalar counts as one row)."""
    tensor = tensor.reshape(1) if tensor.dim() == 0 else tensor
    sizes = _all_gather_equal(torch.tensor([tensor.shape[0]], device=tensor.device))
    longest = int(max(sizes).item())
    padded = tensor
    if tensor.shape[0] < longest:
        filler = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
        padded = torch.cat([tensor, filler])
    parts = _all_gather_equal(padded.contiguous())
    return torch.cat([part[: int(size.item())] for part, size in zip(parts, sizes, strict=True)])


def _all_gather_equal(tensor: Tensor) -> list[Tensor]:
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    return parts
