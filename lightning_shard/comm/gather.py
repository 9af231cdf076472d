"""``gather_in_process_order``: what every process holds, joined in process order, whatever it is.

Tensor trees of one structure on every process are gathered leaf by leaf with tensor collectives (rows may
differ per process), after one all-gather of a four-number header per process that is compared first, so
mismatched trees never pair tensor collectives (docs/DESIGN.md, "Scale", "Exact evaluation"); anything
else is gathered as objects and merged: lists concatenated, dicts key by key, tensors concatenated.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from lightning_shard.comm.collectives import all_gather_objects, communication_device, is_distributed
from lightning_shard.comm.tree import Node, flatten, is_tensor_tree, map_leaves, unflatten

_HASH, _TENSORS, _ROWS, _UNIFORM = range(4)


def gather_in_process_order(data: Any, sources: Sequence[int] | None = None) -> Any:
    """``data`` of every process, joined along the first dimension in process order (a scalar tensor is one
    row); without a process group, ``data`` itself. ``sources``: the global ranks whose parts are kept, in
    that order (``None``: all); every rank still takes part (under a mesh only one rank of an index counts).
    """
    if not is_distributed() or dist.get_world_size() == 1:
        return data
    node, leaves = flatten(data)
    tensors = is_tensor_tree(data)
    header = _all_gather_rows(_header(node, leaves, tensors), communication_device()).cpu()
    # NOTE: one reduction gives every column's range: equal hashes, all tensors, all uniform.
    low, high = (values.tolist() for values in header.aminmax(dim=0))
    if low[_HASH] != high[_HASH] or not low[_TENSORS]:
        parts = all_gather_objects(_to_cpu(data))
        return merge_parts(parts if sources is None else [parts[rank] for rank in sources])
    rows = _leaf_rows(leaves, header, bool(low[_UNIFORM]))
    gathered = [_gather_leaf(leaf, rows[:, column], sources) for column, leaf in enumerate(leaves)]
    return unflatten(node, gathered)


def _header(node: Node, leaves: list[Any], tensors: bool) -> torch.Tensor:
    """This process's ``[hash, tensors, rows, uniform]``: what must agree, and the rows if one count."""
    counts = [_rows(leaf) for leaf in leaves] if tensors else [0]
    # NOTE: what must agree across processes to gather leaf by leaf: structure, dtypes, trailing shapes.
    shape = (_shape_of(node), tuple(_leaf_signature(leaf) for leaf in leaves))
    digest = hashlib.blake2b(repr(shape).encode(), digest_size=8).digest()
    signature = int.from_bytes(digest, "little", signed=True)
    uniform = counts.count(counts[0]) == len(counts)
    return torch.tensor([signature, int(tensors), counts[0], int(uniform)], dtype=torch.int64)


def _rows(leaf: torch.Tensor) -> int:
    return int(leaf.shape[0]) if leaf.dim() else 1


def _leaf_rows(leaves: list[torch.Tensor], header: torch.Tensor, uniform: bool) -> torch.Tensor:
    """``[N, leaves]`` rows of each leaf on each process: from the header when every process's leaves
    agree in rows, else from one more small all-gather (the same decision everywhere: the header is)."""
    if uniform:
        return header[:, _ROWS : _ROWS + 1].expand(-1, len(leaves))
    local = torch.tensor([_rows(leaf) for leaf in leaves], dtype=torch.int64)
    return _all_gather_rows(local, communication_device()).cpu()


def _all_gather_rows(local: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``[N, *local.shape]``: every process's ``local`` (equally shaped), in rank order."""
    local = local.to(device).contiguous()
    world = dist.get_world_size()
    # NOTE: the concatenated form (`[N * rows, ...]`); gloo refuses the stacked one.
    out = local.new_empty((world * local.shape[0], *local.shape[1:]))
    # NOTE: `all_gather_single` replaces the deprecated `all_gather_into_tensor` from torch 2.12 on.
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, local)
    return out.view(world, *local.shape)


def _all_gather_leaf(leaf: torch.Tensor) -> torch.Tensor:
    """``[N * rows, ...]``: every process's ``leaf`` (equally shaped), as bytes, so that every dtype travels
    alike (gloo gathers no bool or int16): viewed as ``uint8``, the last dimension (or a 1-D leaf's rows) holds
    the bytes, and the rows gathered along dimension 0 view back as they were (views only, no copy)."""
    gathered = _all_gather_rows(leaf.contiguous().view(torch.uint8), leaf.device).flatten(0, 1)
    if not gathered.numel():
        # NOTE: no bytes to view back (a dimension of size 0): only the shape is known.
        return leaf.new_empty((len(gathered), *leaf.shape[1:]))
    return gathered.view(leaf.dtype)


def _gather_leaf(leaf: torch.Tensor, rows: torch.Tensor, sources: Sequence[int] | None) -> torch.Tensor:
    """``leaf`` of every process (of ``sources``), concatenated along dimension 0: padded to the longest of
    ``rows`` (each process's count, on the CPU), all-gathered at once, the real rows kept by one index (no
    index when every process has as many rows and all are kept)."""
    leaf = torch.atleast_1d(leaf)
    longest = int(rows.max())
    if leaf.shape[0] < longest:
        leaf = torch.cat([leaf, leaf.new_zeros((longest - leaf.shape[0], *leaf.shape[1:]))])
    padded = _all_gather_leaf(leaf)
    if sources is None and bool((rows == longest).all()):
        return padded  # NOTE: no padding to drop, nothing to reorder: the gather itself.
    ranks = torch.arange(rows.shape[0]) if sources is None else torch.tensor(list(sources), dtype=torch.int64)
    kept = rows[ranks]
    offsets = torch.arange(longest)
    index = (ranks[:, None] * longest + offsets)[offsets < kept[:, None]]
    return padded.index_select(0, index.to(padded.device))


def merge_parts(parts: list[Any]) -> Any:
    """Join what each process held: lists and tuples concatenated, dicts key by key, tensors along dim 0;
    anything else as the list of the parts."""
    first = parts[0]
    if all(isinstance(part, (list, tuple)) for part in parts):
        return [item for part in parts for item in part]
    if all(isinstance(part, Mapping) and part.keys() == first.keys() for part in parts):
        return {key: merge_parts([part[key] for part in parts]) for key in first}
    if all(isinstance(part, torch.Tensor) for part in parts):
        with contextlib.suppress(RuntimeError):
            return torch.cat([torch.atleast_1d(part) for part in parts])
    return list(parts)


def keep_rows(data: Any, rows: slice) -> Any:
    """``rows`` of gathered ``data``: tensors along dimension 0, lists by item, dicts key by key."""
    if is_tensor_tree(data):
        return map_leaves(lambda tensor: tensor[rows], data)
    if isinstance(data, Mapping):
        return {key: keep_rows(value, rows) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return data[rows]
    return data


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
