"""What the classifier decides of a dataset read by a plain ``DataLoader`` (``loaders/kinds.py``)."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from lightning_shard.loaders.kinds import DataKind, classify


def stream_kind(dataset: Any, mode: str = "auto", num_processes: int = 2, num_workers: int = 0) -> DataKind:
    """The ``DataKind`` of ``DataLoader(dataset, batch_size=2)`` prepared for ``num_processes`` processes with
    ``iterable_sharding=mode`` (its ``state_name``: ``"iterable"``, ``"native-stream"``, ``"self-split-stream"``)."""
    loader = DataLoader(dataset, batch_size=2, num_workers=num_workers)
    return classify(
        loader,
        num_processes=num_processes,
        dispatch=False,
        put_on_device=False,
        iterable_sharding=mode,  # type: ignore[arg-type]
        even_batches=True,
    )
