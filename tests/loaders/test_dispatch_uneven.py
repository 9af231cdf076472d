"""``dispatch_batches=True`` with ``even_batches=False`` (docs/DESIGN.md, "Scatter dispatch"): the last global
batch's real rows only, shared as map-style shards share them (a short batch, or none), so evaluation reads
every id once; the state records the setting; training is refused where the processes would take different
numbers of steps, and runs where they would not."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from lightning_shard.comm.topology import Topology
from lightning_shard.lightning.stages import check_even_training
from lightning_shard.options import ShardOptions
from tests.helpers.datasets import IdMap, IdStream, WorkerSplitIdStream
from tests.helpers.dist import progress, run_distributed

pytestmark = pytest.mark.dist

BOUND = 120.0
"""Seconds without a finished case after which every process is killed: each reads a few dozen ids (well
under a second); generous for 2 cores shared with other test runs."""
DISPATCH = {"dispatch_batches": True, "put_on_device": True, "even_batches": False}

CASES: dict[str, Any] = {
    # NOTE: the case: a stream split among 2 workers, 33 ids; the last global batch has 1 row.
    "stream_workers": lambda: DataLoader(
        WorkerSplitIdStream(33), batch_size=4, num_workers=2, multiprocessing_context="fork"
    ),
    "map": lambda: DataLoader(IdMap(23), batch_size=3, shuffle=True),
    "map_split": lambda: DataLoader(IdMap(23), batch_size=4, shuffle=True),
    "map_even_rounds": lambda: DataLoader(IdMap(24), batch_size=3, shuffle=True),
    # NOTE: a last global batch whose rows the processes divide: 20 ids in 7 batches of 3, the last of 2
    # ids alone; 22 ids split 4 at a time, the last of 2. Each goes to the processes it would as shards.
    "map_last_alone": lambda: DataLoader(IdMap(20), batch_size=3, shuffle=True),
    "map_split_divisible": lambda: DataLoader(IdMap(22), batch_size=4, shuffle=True),
}
SPLIT = ("map_split", "map_split_divisible")


def _ids(batch: Any) -> list[int]:
    return [int(i) for i in torch.as_tensor(batch).reshape(-1).tolist()]


def _read(name: str) -> dict[str, Any]:
    """One epoch's ids (evaluation: no collective per step), the state after it, and the training check."""
    options = {**DISPATCH, "split_batches": name in SPLIT}
    loader = prepare_data_loader(CASES[name](), **options)
    length = len(loader) if name != "stream_workers" else None
    batches = [_ids(batch) for batch in loader]
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, batches)
    try:
        check_even_training(loader, ShardOptions(**options), Topology(2, dist.get_rank()))
        refusal = None
    except ValueError as error:
        refusal = str(error)
    return {"all": everyone, "own": batches, "len": length, "state": loader.state_dict(), "refusal": refusal}


def _uneven_lengths(rank: int) -> str | None:
    loader = prepare_data_loader(DataLoader(IdMap(25), batch_size=3), **DISPATCH)
    try:
        check_even_training(loader, ShardOptions(**DISPATCH), Topology(2, rank))
    except ValueError as error:
        return str(error)
    return None


def _padded() -> list[list[int]]:
    loader = prepare_data_loader(
        DataLoader(IdStream(5), batch_size=2), dispatch_batches=True, put_on_device=True
    )
    return [_ids(batch) for batch in loader]


def scenarios(rank: int, world_size: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in CASES:
        results[name] = _read(name)
        progress(name)
    results["uneven_lengths"] = _uneven_lengths(rank)
    results["padded"] = _padded()
    return results


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_distributed(scenarios, 2, timeout=BOUND, daemon=False)


@pytest.mark.parametrize(
    "name, total",
    [
        ("stream_workers", 33),
        ("map", 23),
        ("map_split", 23),
        ("map_even_rounds", 24),
        ("map_last_alone", 20),
        ("map_split_divisible", 22),
    ],
)
def test_evaluation_reads_every_id_once(results: list[dict[str, Any]], name: str, total: int) -> None:
    ids = [i for rank in results[0][name]["all"] for batch in rank for i in batch]
    counts = Counter(ids)
    assert sorted(counts) == list(range(total)) and max(counts.values()) == 1, "no id twice, none left out"
    for result in results:
        assert result[name]["state"]["even_batches"] is False, "the state records the setting passed"


def test_a_process_left_no_rows_takes_no_last_step(results: list[dict[str, Any]]) -> None:
    # NOTE: 23 ids in batches of 3 on 2 processes: 8 batches, the last of 2 ids; each process its own batch.
    steps = [len(result["map"]["own"]) for result in results]
    assert steps == [4, 4] and [len(result["map"]["own"][-1]) for result in results] == [3, 2]
    # NOTE: split: the last batch (23 = 5 x 4 + 3) is 3 rows: process 0 gets 2, process 1 gets 1.
    assert [result["map_split"]["own"][-1] for result in results][0].__len__() == 2
    assert [len(result["map_split"]["own"]) for result in results] == [6, 6]
    # NOTE: the same when the processes divide the last global batch's rows: its one batch to process 0.
    assert [len(result["map_last_alone"]["own"]) for result in results] == [4, 3]
    assert len(results[0]["map_last_alone"]["own"][-1]) == 2
    # NOTE: 22 = 5 x 4 + 2: the last batch's 2 rows are process 0's part, none is left for process 1.
    assert [len(result["map_split_divisible"]["own"]) for result in results] == [6, 5]
    assert len(results[0]["map_split_divisible"]["own"][-1]) == 2


@pytest.mark.parametrize("name", [name for name in CASES if name != "stream_workers"])
def test_len_is_what_each_process_yields(results: list[dict[str, Any]], name: str) -> None:
    for result in results:
        assert result[name]["len"] == len(result[name]["own"])


def test_training_is_refused_where_the_processes_would_step_differently(
    results: list[dict[str, Any]],
) -> None:
    for result in results:
        assert "dispatch_batches=True` over a stream without a length" in result["stream_workers"]["refusal"]
        assert result["map_even_rounds"]["refusal"] is None, "8 batches: 4 steps each, exact"


def test_uneven_map_training_is_refused_by_its_lengths(results: list[dict[str, Any]]) -> None:
    for result in results:
        assert "gives the training processes [5, 4] batches" in result["uneven_lengths"]


def test_a_stream_pads_by_default(results: list[dict[str, Any]]) -> None:
    first, second = (result["padded"] for result in results)
    assert first[-1] == [4] and second[-1] == [0], "even_batches=True: the last global batch completed"
