"""``gather_in_process_order``: what every process holds, joined in process order, whatever it is.

Tensor trees of one structure on every process are gathered leaf by leaf with tensor collectives (rows
may differ per process); anything else (strings, lists of dicts, trees that differ per process) is
gathered as objects and merged: lists concatenated, dicts merged key by key, tensors concatenated.
One small object collective first compares the structures, so a tree that differs on some process can
never pair mismatched tensor collectives (docs/DESIGN.md, "Exact evaluation").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from lightning_shard.comm.collectives import is_distributed
from lightning_shard.comm.tree import Node, flatten, is_tensor_tree, map_leaves, unflatten


def gather_in_process_order(data: Any, sources: Sequence[int] | None = None) -> Any:
    """``data`` of every process, joined along the first dimension in process order.

    A scalar tensor counts as one row. Without a process group, ``data`` itself.

    Args:
        data: this process's part.
        sources: the global ranks whose parts are kept, in that order (``None``: every rank). Every rank
            still takes part: under a mesh the ranks of one data-parallel index hold the same data, and
            only one of them counts.
    """
    if not is_distributed() or dist.get_world_size() == 1:
        return data
    signatures: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(signatures, _signature(data))
    if is_tensor_tree(data) and all(signature == signatures[0] for signature in signatures):
        return map_leaves(lambda tensor: _gather_tensor(tensor, sources), data)
    parts: list[Any] = [None] * len(signatures)
    dist.all_gather_object(parts, _to_cpu(data))
    return merge_parts(_kept(parts, sources))


def _kept(parts: list[Any], sources: Sequence[int] | None) -> list[Any]:
    return parts if sources is None else [parts[rank] for rank in sources]


def merge_parts(parts: list[Any]) -> Any:
    """Join what each process held: lists and tuples concatenated, dicts key by key, tensors along dim 0;
    anything else as the list of the parts."""
    first = parts[0]
    if all(isinstance(part, (list, tuple)) for part in parts):
        return [item for part in parts for item in part]
    if all(isinstance(part, Mapping) for part in parts) and all(
        part.keys() == first.keys() for part in parts
    ):
        return {key: merge_parts([part[key] for part in parts]) for key in first}
    if all(isinstance(part, torch.Tensor) for part in parts):
        try:
            return torch.cat([part.reshape(1) if part.dim() == 0 else part for part in parts])
        except RuntimeError:
            return list(parts)
    return list(parts)


def keep_rows(data: Any, rows: slice) -> Any:
    """``rows`` of gathered ``data``: tensors along dimension 0, lists by item, dicts key by key."""
    if isinstance(data, torch.Tensor):
        return data[rows]
    if is_tensor_tree(data):
        return map_leaves(lambda tensor: tensor[rows], data)
    if isinstance(data, Mapping):
        return {key: keep_rows(value, rows) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return data[rows]
    return data


def rows_of(data: Any) -> int | None:
    """How many rows (samples) gathered ``data`` holds, if it says: a tensor's first dimension, a list's length."""
    if isinstance(data, torch.Tensor):
        return int(data.shape[0]) if data.dim() else 1
    if isinstance(data, Mapping):
        counts = {rows_of(value) for value in data.values()}
        return counts.pop() if len(counts) == 1 else None
    if isinstance(data, (list, tuple)):
        return len(data)
    return None


def _signature(data: Any) -> Any:
    """What must agree across processes to gather ``data`` leaf by leaf: structure, dtypes, trailing shapes."""
    node, leaves = flatten(data)
    return (_shape_of(node), tuple(_leaf_signature(leaf) for leaf in leaves))


def _shape_of(node: Node) -> Any:
    if node.kind == "const":
        return ("const", type(node.value).__name__)
    return (node.kind, node.keys, tuple(_shape_of(child) for child in node.children))


def _leaf_signature(leaf: Any) -> Any:
    if isinstance(leaf, torch.Tensor):
        return (str(leaf.dtype), tuple(leaf.shape[1:]), leaf.dim() > 0)
    return ("seq", len(leaf))


def _to_cpu(data: Any) -> Any:
    """``data`` with its tensors on the CPU, for an object collective (flattened once)."""
    node, leaves = flatten(data)
    if not any(isinstance(leaf, torch.Tensor) for leaf in leaves):
        return data
    return unflatten(node, [leaf.cpu() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves])


def _gather_tensor(tensor: torch.Tensor, sources: Sequence[int] | None) -> torch.Tensor:
    """``tensor`` of every process (of ``sources``), concatenated along dimension 0 (a scalar is one row)."""
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
