"""Hugging Face ``datasets.IterableDataset``s built from local generators (no network), one shard per
range of ids, so shards may differ in length."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets  # noqa: E402 - after the offline switch

from tests.helpers.datasets import id_shards  # noqa: E402

datasets.disable_progress_bars()


def _records(shards: Sequence[Sequence[int]]) -> Iterator[dict[str, int]]:
    for shard in shards:
        for index in shard:
            yield {"id": index}


def hf_id_stream(lengths: Sequence[int]) -> Any:
    """A ``datasets.IterableDataset`` of ``{"id": i}`` with one shard per length: ids ``0 .. sum - 1`` in order."""
    return datasets.IterableDataset.from_generator(_records, gen_kwargs={"shards": id_shards(lengths)})
