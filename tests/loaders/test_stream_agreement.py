"""The stream end agreement on 3 real gloo processes whose shares end at three different steps
(docs/DESIGN.md, "Streaming data", "Scale"): two integers per fetch, however the shares end; each process's
end found again on resume from a state that holds none; a released state's recorded ends still honoured.

A training loop is imitated by an ``all_reduce`` after every batch, as DDP's gradient sync does: a process
that took a step the others did not take would block there.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from lightning_shard.loaders.streams import StreamReport
from tests.helpers.datasets import IdShardsStream, id_shards
from tests.helpers.dist import progress, run_distributed

pytestmark = pytest.mark.dist

BOUND = 120.0
"""Seconds without a batch after which every process is killed: a batch takes milliseconds; generous for
2 cores shared with other test runs."""

LENGTHS = [13, 5, 9, 4, 0, 0]
"""Shares of 3 processes: 13, 5 and 9 ids, so 7, 3 and 5 batches of 2 (the first 3 shards); the last 3
shards, on their own, give processes 1 and 2 empty shares."""
STOP = 6
"""Steps before the state is saved: process 1 ended at 3 (its padding restarts at 6), process 2 at 5 (one
batch into its padding), process 0 still reads its share."""
PER_FETCH = 2 * 8
"""Bytes one fetch's check all-reduces: two int64."""


def _loader(lengths: list[int], **options: Any) -> Any:
    return prepare_data_loader(DataLoader(IdShardsStream(id_shards(lengths)), batch_size=2), **options)


def train(loader: Any, steps: int | None = None) -> tuple[list[list[int]], list[int]]:
    """The ids of each batch and the bytes the agreement had exchanged after each, with a collective after
    every batch (as DDP), for ``steps`` batches or all."""
    seen, exchanged = [], []
    for batch in loader:
        seen.append([int(i) for i in batch])
        exchanged.append(loader.stream.exchanged)
        dist.all_reduce(torch.ones(1))
        progress("batch")
        if steps is not None and len(seen) == steps:
            break
    return seen, exchanged


def scenarios(rank: int, world_size: int) -> dict[str, Any]:
    shares = LENGTHS[:3]
    full = _loader(shares)
    whole, exchanged = train(full)
    first = _loader(shares)
    head, _ = train(first, STOP)
    state = first.state_dict()
    again = _loader(shares)
    again.load_state_dict(state)
    tail, _ = train(again)
    ends = full.stream.report.ended_at
    released = {**state, "streams": [{"ended_at": e if e is not None and e <= STOP else None} for e in ends]}
    honoured = _loader(shares)
    honoured.load_state_dict(released)
    rest, _ = train(honoured)
    shortest = _loader(shares, even_batches=False)
    stopped, shortest_exchanged = train(shortest)
    try:
        train(_loader(LENGTHS[3:]))
        empty = None
    except RuntimeError as error:
        empty = str(error)
    return {
        "whole": whole,
        "exchanged": exchanged,
        "total": full.stream.exchanged,
        "report": full.stream.report,
        "head": head,
        "state": state,
        "tail": tail,
        "tail_report": again.stream.report,
        "rest": rest,
        "rest_report": honoured.stream.report,
        "stopped": stopped,
        "shortest_exchanged": shortest_exchanged,
        "shortest_report": shortest.stream.report,
        "empty": empty,
    }


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_distributed(scenarios, 3, timeout=BOUND)


def test_shares_ending_at_three_steps_are_padded_and_reported(results: list[dict[str, Any]]) -> None:
    report = results[0]["report"]
    assert all(rank["report"] == report for rank in results), "the report is the same on every process"
    assert report == StreamReport(0, 7, read=(13, 5, 9), padded=(0, 7, 4), ended_at=(7, 3, 5))
    assert [len(rank["whole"]) for rank in results] == [7, 7, 7]
    assert [[i for batch in rank["whole"] for i in batch] for rank in results][1] == [
        *range(13, 18),
        *[13, 14, 15, 16, 17, 13, 14],
    ], "process 1 reads its share, then restarts it"


def test_every_fetch_exchanges_the_same_bytes_however_the_shares_end(results: list[dict[str, Any]]) -> None:
    """Steps 3 and 5, where shares end, cost what every other fetch costs; the report's sums, once at the
    epoch's end, are the only part that grows with the number of processes (``3N + 1`` integers)."""
    for rank in results:
        for exchanged, steps in ((rank["exchanged"], 7), (rank["shortest_exchanged"], 3)):
            # NOTE: the first batch is yielded once its own check and the next batch's have started.
            assert exchanged == [PER_FETCH * (step + 2) for step in range(steps)]
        assert rank["total"] == PER_FETCH * 8 + 8 * (3 * 3 + 1)


def test_a_state_without_ends_resumes_each_process_exactly(results: list[dict[str, Any]]) -> None:
    assert all(rank["state"] == results[0]["state"] for rank in results), "the same state on every process"
    assert results[0]["state"]["streams"] == [], "no process's end is saved"
    for rank in results:
        assert rank["head"] + rank["tail"] == rank["whole"], "each finds its own end and padding position"
    tail = results[0]["tail_report"]
    assert tail.ended_at == (7, 3, 5) and tail.steps == 1, "the ends found again are the ends"
    assert tail.read == (1, 0, 0) and tail.padded == (0, 2, 2)


def test_a_released_state_with_recorded_ends_still_resumes_exactly(results: list[dict[str, Any]]) -> None:
    for rank in results:
        assert rank["head"] + rank["rest"] == rank["whole"]
    assert results[0]["rest_report"] == results[0]["tail_report"]


def test_shortest_stops_at_the_first_end_on_three(results: list[dict[str, Any]]) -> None:
    report = results[0]["shortest_report"]
    assert all(rank["shortest_report"] == report for rank in results)
    assert report.ended_at == (None, 3, None) and report.read == (6, 5, 6)
    assert report.unseen == (13 - 6) + (9 - 6)


def test_empty_shares_are_named_on_every_process(results: list[dict[str, Any]]) -> None:
    messages = {rank["empty"] for rank in results}
    assert len(messages) == 1 and "processes [1, 2]" in messages.pop()
