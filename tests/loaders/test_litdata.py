"""Real LitData streams on a real 2-process gloo group (docs/DESIGN.md, "LitData"): built inside the
process group (LitData then detects the world and turns its own ``drop_last`` on), split once with the
loader's ``drop_last``; uneven shares end together; dispatch reads the whole dataset on process 0.

One launch; ``run_distributed``'s bound kills a hang. A collective after every batch imitates DDP's
gradient sync: a process taking a step the other does not would block there.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from lightning_shard import prepare_data_loader
from tests.helpers.dist import run_distributed
from tests.helpers.litdata_ids import IDS, require_litdata, session_ids

pytestmark = pytest.mark.dist

require_litdata()

BOUND = 120.0
"""Seconds after which every process is killed: generous for 2 cores shared with other test runs."""


def train(loader: Any) -> list[list[int]]:
    """The ids of each batch, with a collective after every one (as DDP)."""
    seen = []
    for batch in loader:
        seen.append([int(i) for i in batch["id"]])
        dist.all_reduce(torch.ones(1))
    return seen


def scenarios(rank: int, world_size: int, data: str) -> dict[str, Any]:
    from litdata import StreamingDataLoader, StreamingDataset

    built_inside = StreamingDataset(data, shuffle=True, seed=3)
    detected = (built_inside.distributed_env.world_size, built_inside.drop_last)
    loader = prepare_data_loader(StreamingDataLoader(built_inside, batch_size=4))
    shard = train(loader)
    dispatched = prepare_data_loader(
        StreamingDataLoader(StreamingDataset(data, shuffle=True, seed=3), batch_size=4),
        dispatch_batches=True,
        put_on_device=True,
    )
    return {
        "detected": detected,
        "shard": shard,
        "report": loader.stream.report,
        "dispatch": train(dispatched),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    data = session_ids(tmp_path_factory)
    return run_distributed(scenarios, 2, data, timeout=BOUND)


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


def test_a_dataset_built_in_the_process_group_is_split_once_with_the_loaders_drop_last(
    results: list[dict[str, Any]],
) -> None:
    assert results[0]["detected"] == (2, True), "LitData saw the group and turned its `drop_last` on"
    first, second = (result["shard"] for result in results)
    assert len(first) == len(second) == 7, "the shorter share padded to the longer one's steps"
    assert sorted(_flat(first[:6]) + _flat(second)) == list(range(IDS)), "every sample, none dropped"
    report = results[0]["report"]
    assert (report.read, report.padded) == ((24, 26), (4, 0))


def test_dispatch_reads_the_whole_dataset_on_process_0(results: list[dict[str, Any]]) -> None:
    ids = _flat(results[0]["dispatch"]) + _flat(results[1]["dispatch"])
    assert set(ids) == set(range(IDS)), "process 0 read all of it, not its LitData share"
