"""Dispatch sends each process only its slice, and the structure only when it changes (docs/DESIGN.md, "Scatter dispatch").

One launch of two gloo processes. Process 1 counts what it receives (``bytes_received``) batch by
batch: each message is a fixed 32-byte header plus the slice's tensor bytes, plus the pickled
layout only when the slice's structure (nesting, dtypes, shapes) differs from the previous one. The
reference broadcasts every global batch to every process; ours never sends a process more than its
own rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from lightning_shard import prepare_data_loader
from tests.helpers.dist import run_distributed

pytestmark = pytest.mark.dist

HEADER = 4 * 8
DISPATCH = {"dispatch_batches": True, "put_on_device": True}


class WideRecordMap(Dataset):
    """Sample ``i``: ``{"x": width floats, all i, "y": i}``."""

    def __init__(self, length: int, width: int = 16) -> None:
        self.length = length
        self.width = width

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": torch.full((self.width,), float(index)), "y": index}


class RaggedMap(Dataset):
    """Sample ``i``: a sequence of ``1 + i % 5`` copies of ``i``; batches pad to their longest."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((1 + index % 5,), index)


def pad_collate(samples: list[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(samples, batch_first=True, padding_value=-1)


class UnsizedTensorStream(IterableDataset):
    """A stream of unknown length whose length differs on every process (only process 0's counts)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Iterator[torch.Tensor]:
        return (torch.tensor([index]) for index in range(self.length))


def nbytes(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    return sum(nbytes(value) for value in batch.values())


def _received(loader: Any) -> list[tuple[Any, int, int]]:
    """Per batch: the batch, the bytes received for it, and its tensor bytes."""
    out, before = [], loader.bytes_received
    for batch in loader:
        out.append((batch, loader.bytes_received - before, nbytes(batch)))
        before = loader.bytes_received
    return out


def _fixed_records(rank: int, width: int = 16, batch_size: int = 4) -> dict[str, Any]:
    loader = prepare_data_loader(
        DataLoader(WideRecordMap(10 * batch_size, width), batch_size=batch_size), **DISPATCH
    )
    batches = _received(loader)
    return {
        "rows": [batch["y"].tolist() for batch, _, _ in batches],
        "x_matches_y": all(
            torch.equal(batch["x"], batch["y"].float()[:, None].expand(-1, width)) for batch, _, _ in batches
        ),
        "received": [(got, data) for _, got, data in batches],
        "total": loader.bytes_received,
    }


def _ragged(rank: int, length: int) -> dict[str, Any]:
    loader = prepare_data_loader(
        DataLoader(RaggedMap(length), batch_size=4, collate_fn=pad_collate), split_batches=True, **DISPATCH
    )
    try:
        batches = _received(loader)
    except (ValueError, RuntimeError) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {
        "batches": [batch.tolist() for batch, _, _ in batches],
        "received": [(g, d) for _, g, d in batches],
    }


def _not_concatenable(rank: int) -> str:
    loader = prepare_data_loader(DataLoader(RaggedMap(12), batch_size=2, collate_fn=pad_collate), **DISPATCH)
    try:
        list(loader)
    except (ValueError, RuntimeError) as error:
        return f"{type(error).__name__}: {error}"
    return "no error"


def _stop_together(rank: int) -> dict[str, Any]:
    # NOTE: process 1's own stream is longer, process 2's shorter: only process 0's data counts.
    loader = prepare_data_loader(DataLoader(UnsizedTensorStream(13 + 5 * rank), batch_size=2), **DISPATCH)
    seen = [(batch.flatten().tolist(), loader.end_of_dataloader) for batch in loader]
    return {"seen": seen, "again": len(list(loader))}


def run_bytes(rank: int, world_size: int) -> dict[str, Any]:
    return {
        "fixed": _fixed_records(rank),
        "large": _fixed_records(rank, width=1024, batch_size=32),
        "ragged": _ragged(rank, 24),
        "ragged_padded": _ragged(rank, 21),
        "not_concatenable": _not_concatenable(rank),
        "stop": _stop_together(rank),
    }


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_distributed(run_bytes, 2, timeout=90)


def test_each_process_receives_its_slice_and_the_layout_once(results: list[dict[str, Any]]) -> None:
    assert results[0]["fixed"]["total"] == 0, "process 0 loads; it receives nothing"
    received = results[1]["fixed"]["received"]
    assert len(received) == 5
    first, rest = received[0], received[1:]
    # x: 4 rows x 16 float32, y: 4 int64 -- this process's rows only; the global batch is twice that.
    assert all(data == 4 * 16 * 4 + 4 * 8 for _, data in received)
    assert all(got == HEADER + data for got, data in rest), "no layout after the first batch"
    assert HEADER + first[1] < first[0] < HEADER + first[1] + 2000, "the first batch carries the layout"
    assert results[1]["fixed"]["total"] < 1.1 * sum(data for _, data in received) + 2000
    assert results[0]["fixed"]["rows"][0] == [0, 1, 2, 3] and results[1]["fixed"]["rows"][0] == [4, 5, 6, 7]


def test_large_tensors_travel_alone_and_arrive_intact(results: list[dict[str, Any]]) -> None:
    # x: 32 rows x 1024 float32 = 128 KiB, sent and received without packing.
    received = results[1]["large"]["received"]
    assert all(data == 32 * 1024 * 4 + 32 * 8 for _, data in received)
    assert all(got == HEADER + data for got, data in received[1:])
    assert all(result["large"]["x_matches_y"] for result in results)
    assert [rows[0] for rows in results[1]["large"]["rows"]] == list(range(32, 320, 64))


def test_variable_length_tensors_split_and_resend_the_layout_only_on_change(
    results: list[dict[str, Any]],
) -> None:
    whole = [
        pad_collate([RaggedMap(24)[i] for i in range(start, start + 4)]).tolist() for start in range(0, 24, 4)
    ]
    for rank in (0, 1):
        assert results[rank]["ragged"]["batches"] == [batch[2 * rank : 2 * rank + 2] for batch in whole]
    received = results[1]["ragged"]["received"]
    widths = [len(batch[0]) for batch in whole]
    for position, (got, data) in enumerate(received):
        changed = position == 0 or widths[position] != widths[position - 1]
        assert (got > HEADER + data) == changed, f"batch {position}: layout sent iff the shape changed"


def test_padding_a_ragged_last_batch_fails_clearly_on_every_process(results: list[dict[str, Any]]) -> None:
    # 21 samples, batches of 4: the last has 1 row, completed with the first rows (another width).
    zero, one = results[0]["ragged_padded"]["error"], results[1]["ragged_padded"]["error"]
    assert zero.startswith("ValueError") and "drop_last=True" in zero and "1 rows" in zero
    assert one.startswith("RuntimeError") and "drop_last=True" in one


def test_batches_that_cannot_be_concatenated_fail_clearly_on_every_process(
    results: list[dict[str, Any]],
) -> None:
    zero, one = results[0]["not_concatenable"], results[1]["not_concatenable"]
    assert zero.startswith("ValueError") and "concatenable" in zero and "split_batches=True" in zero
    assert one.startswith("RuntimeError") and "Process 0 failed" in one and "split_batches=True" in one


def test_every_process_stops_when_process_0_runs_out(results: list[dict[str, Any]]) -> None:
    zero, one = results[0]["stop"], results[1]["stop"]
    # 13 elements, batches of 2, 2 processes: the last global batch is [12], padded with the first rows.
    assert [rows for rows, _ in zero["seen"]] == [[0, 1], [4, 5], [8, 9], [12]]
    assert [rows for rows, _ in one["seen"]] == [[2, 3], [6, 7], [10, 11], [0]]
    assert [end for _, end in zero["seen"]] == [end for _, end in one["seen"]] == [False, False, False, True]
    assert zero["again"] == one["again"] == 4
