"""What the classifier decides of a dataset read by a plain ``DataLoader`` (``loaders/kinds.py``)."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from lightning_shard.comm.topology import Topology
from lightning_shard.loaders.kinds import DataKind, classify
from lightning_shard.options import ShardOptions


def stream_kind(dataset: Any, mode: str = "auto", num_processes: int = 2, num_workers: int = 0) -> DataKind:
    """The ``DataKind`` of ``DataLoader(dataset, batch_size=2)`` prepared for ``num_processes`` processes with
    ``iterable_sharding=mode`` (its ``state_name``: ``"iterable"``, ``"native-stream"``, ``"self-split-stream"``)."""
    loader = DataLoader(dataset, batch_size=2, num_workers=num_workers)
    options = ShardOptions(dispatch_batches=False, iterable_sharding=mode)  # type: ignore[arg-type]
    return classify(loader, options, Topology(num_processes, 0))
