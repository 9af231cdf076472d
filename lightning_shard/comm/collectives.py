"""The collectives the core uses: objects and tensors across the default process group.

Each is the identity (or a one-element list) without a running process group, so single-process code
paths need no special case.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from lightning_shard.comm.tree import is_tensor_tree, map_leaves


def is_distributed() -> bool:
    """Whether a default ``torch.distributed`` process group is running."""
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """Processes in the default group (1 without one)."""
    return dist.get_world_size() if is_distributed() else 1


def broadcast_object(value: Any, src: int = 0) -> Any:
    """``value`` from global rank ``src`` on every process (identity without a process group)."""
    if not is_distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_objects(value: Any) -> list[Any]:
    """Every process's ``value``, in rank order (``[value]`` without a process group)."""
    if not is_distributed():
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def object_nbytes(value: Any) -> int:
    """How many bytes ``value`` takes when pickled (what an object collective would send)."""
    return len(pickle.dumps(value))


def communication_device() -> torch.device:
    """The device tensors must be on for the default group's backend (CUDA for NCCL)."""
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather_in_process_order(data: Any, sources: Sequence[int] | None = None) -> Any:
    """``data`` of every process, concatenated along the first dimension in process order.

    Tensors (also nested in dicts, lists and tuples) may differ in their first dimension across
    processes; anything else is gathered as objects (a list is concatenated, other values listed).

    Args:
        data: this process's part.
        sources: the global ranks whose parts are kept, in that order (``None``: every rank). Every
            rank still takes part: under a mesh the ranks of one data-parallel index hold the same
            data, and only one of them counts.
    """
    if not is_distributed() or dist.get_world_size() == 1:
        return data
    if is_tensor_tree(data):
        return map_leaves(lambda tensor: _gather_tensor(tensor, sources), data)
    gathered = _kept(all_gather_objects(data), sources)
    if isinstance(data, (list, tuple)):
        return [item for part in gathered for item in part]
    return gathered


def _kept(parts: list[Any], sources: Sequence[int] | None) -> list[Any]:
    return parts if sources is None else [parts[rank] for rank in sources]


def _gather_tensor(tensor: torch.Tensor, sources: Sequence[int] | None = None) -> torch.Tensor:
    """``tensor`` of every process (of ``sources``), concatenated along dimension 0 (a scalar counts as one row)."""
    tensor = tensor.reshape(1) if tensor.dim() == 0 else tensor
    sizes = _all_gather_equal(torch.tensor([tensor.shape[0]], device=tensor.device))
    longest = int(max(sizes).item())
    padded = tensor
    if tensor.shape[0] < longest:
        filler = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
        padded = torch.cat([tensor, filler])
    parts = _all_gather_equal(padded.contiguous())
    kept = zip(_kept(parts, sources), _kept(sizes, sources), strict=True)
    return torch.cat([part[: int(size.item())] for part, size in kept])


def _all_gather_equal(tensor: torch.Tensor) -> list[torch.Tensor]:
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    return parts
