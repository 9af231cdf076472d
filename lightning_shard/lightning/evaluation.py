"""Exact evaluation: gathered outputs without the samples ``even_batches`` repeated (DESIGN.md, "Exact evaluation")."""

from __future__ import annotations

from typing import Any

from lightning_shard.comm.tree import is_tensor_tree, map_leaves


def keep_first(data: Any, count: int) -> Any:
    """The first ``count`` samples of gathered ``data`` (tensors along dimension 0, or a list)."""
    if is_tensor_tree(data):
        return map_leaves(lambda tensor: tensor[:count], data)
    return data[:count]
