"""Exact evaluation over streams: gathered outputs without the padding batches of the processes whose share
had ended (docs/DESIGN.md, "Streaming data").

NOTE: a strided or map-style loader pads only the last global batch, so dropping the padding needs the
loader's ``remainder`` at its last batch (``StrategySharding.gather_for_metrics``). A stream whose shares
end unevenly pads whole batches, on some processes only, for several steps, and which batch is the
last is known only one step later. So each batch's padding is queued by the loader as it is yielded,
taken by the strategy when Lightning moves that batch to the device (once per consumed batch, after
Lightning's read-ahead), and the gather drops the parts of the processes whose batch was padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lightning_shard.comm.collectives import communication_device
from lightning_shard.comm.gather import gather_in_process_order
from lightning_shard.comm.tree import batch_length, is_tensor_tree, map_leaves


def gather_stream_for_metrics(data: Any, padding: int, sources: Sequence[int] | None = None) -> Any:
    """``data`` of every process in process order, without the parts of processes whose batch was padding.

    Every process must call it (two all-gathers: each process's row count and padding, then ``data``);
    ``sources`` keeps one rank per data-parallel index, as in ``gather_in_process_order``.
    """
    rows = _rows(data)
    counts = gather_in_process_order(
        torch.tensor([[rows, min(padding, rows)]], dtype=torch.int64, device=communication_device()), sources
    )
    gathered = gather_in_process_order(data, sources)
    if not bool(counts[:, 1].any()):
        return gathered
    keep: list[int] = []
    offset = 0
    for count, padded in counts.tolist():
        keep.extend(range(offset, offset + count - padded))
        offset += count
    if is_tensor_tree(gathered):
        return map_leaves(lambda tensor: tensor[keep], gathered)
    return [gathered[index] for index in keep]


def _rows(data: Any) -> int:
    """The rows ``data`` contributes to a gather (a scalar, or a non-list object, counts as one)."""
    if is_tensor_tree(data):
        return max(batch_length(data), 1)
    return len(data) if isinstance(data, (list, tuple)) else 1
