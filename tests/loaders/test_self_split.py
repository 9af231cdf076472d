"""Streams that split themselves, with the real libraries on local files (docs/DESIGN.md, "Streams that split
themselves"): webdataset pipelines split by ``split_by_node`` and mosaicml-streaming's ``StreamingDataset``
are read as each process's own part, every sample once per epoch; a position resumes exactly on as many
processes, and on fewer through mosaicml-streaming's own state, or is refused with the reason.

Each library's scenarios run in one launch per number of processes; each scenario is reported when it ends
(``progress``), so the bound is the time without one.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from tests.helpers.dist import progress, run_distributed
from tests.helpers.mosaic import mosaic_dataset, write_mds
from tests.helpers.webdataset_shards import sample_id, write_tars

pytestmark = pytest.mark.dist

BOUND = 180.0
"""Seconds without a finished scenario after which every process is killed: a scenario reads 96 samples a
few times (well under 10 s alone); generous for 2 cores shared with other test runs."""

SHARDS = [24, 24, 24, 24]
STOP = 5
"""Steps the interrupted epoch takes before its state is saved."""


def _loader(dataset: Any, workers: int, batch_size: int = 4, **options: Any) -> Any:
    context = "fork" if workers else None  # NOTE: forked workers see the rank (see webdataset's guide)
    plain = DataLoader(dataset, batch_size=batch_size, num_workers=workers, multiprocessing_context=context)
    return prepare_data_loader(plain, **options)


def _ids(batch: Any) -> list[int]:
    return [int(i) for i in (batch["id"] if isinstance(batch, dict) else batch)]


def _epoch(loader: Any, steps: int | None = None) -> list[list[int]]:
    """The ids of each batch (a collective after each, as DDP's step), for ``steps`` batches or all."""
    seen = []
    for batch in loader:
        seen.append(_ids(batch))
        dist.all_reduce(torch.ones(1))
        if steps is not None and len(seen) == steps:
            break
    return seen


def _whole_and_resumed(make: Callable[[], Any]) -> dict[str, Any]:
    """Epoch 1 uninterrupted; the same epoch stopped after ``STOP`` steps, its state loaded into a new loader."""
    full = make()
    full.set_epoch(1)
    first = make()
    first.set_epoch(1)
    whole, head = _epoch(full), _epoch(first, STOP)
    state = first.state_dict()
    again = make()
    again.load_state_dict(state)
    return {"whole": whole, "head": head, "tail": _epoch(again), "state": state}


def _webdataset(tars: list[str], pipeline: str) -> Any:
    import webdataset as wds

    if pipeline == "DataPipeline":
        stages = [wds.SimpleShardList(tars), wds.split_by_node, wds.split_by_worker, wds.tarfile_to_samples()]
        return wds.DataPipeline(*stages, wds.map(sample_id))
    return wds.WebDataset(tars, shardshuffle=False, nodesplitter=wds.split_by_node).map(sample_id)


def webdataset_scenarios(rank: int, world_size: int, tars: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for workers in (0, 2) if world_size == 2 else (0,):
        for pipeline in ("WebDataset", "DataPipeline"):
            loader = _loader(_webdataset(tars, pipeline), workers)
            results[f"{pipeline}{workers}"] = [_epoch(loader) for _ in range(2)]
            progress(f"{pipeline}{workers}")
        make = functools.partial(lambda count: _loader(_webdataset(tars, "WebDataset"), count), workers)
        results[f"resumed{workers}"] = _whole_and_resumed(make)
        progress(f"resumed{workers}")
    results["unsplit"] = _unsplit(tars)
    if world_size == 2:
        results["batched"] = _batched_in_pipeline(tars)
    return results


def _id_dict(sample: dict[str, Any]) -> dict[str, int]:
    return {"id": sample_id(sample)}


def _batched_in_pipeline(tars: list[str]) -> dict[str, Any]:
    """A pipeline that batches itself, read with ``DataLoader(batch_size=None)``: the epoch's ids and report."""
    import webdataset as wds

    pipeline = (
        wds.WebDataset(tars, shardshuffle=False, nodesplitter=wds.split_by_node).map(_id_dict).batched(4)
    )
    loader = prepare_data_loader(DataLoader(pipeline, batch_size=None))
    ids = _flat(_epoch(loader))
    report = loader.stream.report
    return {"ids": ids, "report": report.summary() if report is not None else None}


def _unsplit(tars: list[str]) -> str:
    """webdataset's own error for a pipeline without a node splitter on several processes."""
    import webdataset as wds

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NOTE: the fallback to striding: not what is tested here
        loader = _loader(wds.WebDataset(tars, shardshuffle=False).map(sample_id), 0)
    try:
        _epoch(loader)
    except ValueError as error:
        return str(error)
    return "no error"


def _replaced_before_iterating(make: Callable[[], Any]) -> dict[str, Any]:
    """A mid-epoch state loaded, then replaced by a state saved between epochs before any batch: the epoch the
    second names, read whole, against a fresh loader's."""
    first = make()
    first.set_epoch(1)
    _epoch(first, STOP)
    fresh = make()
    fresh.set_epoch(2)
    between = fresh.state_dict()
    expected = _epoch(fresh)
    again = make()
    again.load_state_dict(first.state_dict())
    again.load_state_dict(between)
    return {"expected": expected, "read": _epoch(again)}


def _mosaic(local: str, rank: int, world_size: int, **kwargs: Any) -> Any:
    return mosaic_dataset(local, rank, world_size, batch_size=4, shuffle=True, **kwargs)


def mosaic_scenarios(rank: int, world_size: int, local: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for workers in (0, 2):
        loader = _loader(_mosaic(local, rank, world_size), workers)
        results[f"epochs{workers}"] = [_epoch(loader) for _ in range(2)]
        progress(f"epochs{workers}")
        make = functools.partial(lambda count: _loader(_mosaic(local, rank, world_size), count), workers)
        results[f"resumed{workers}"] = _whole_and_resumed(make)
        progress(f"resumed{workers}")
    results["replaced"] = _replaced_before_iterating(lambda: _loader(_mosaic(local, rank, world_size), 0))
    try:
        _loader(_mosaic(local, rank, world_size, predownload=8), 2, batch_size=2)
        results["other_batch_size"] = None
    except ValueError as error:
        results["other_batch_size"] = str(error)
    return results


def mosaic_resumed_alone(rank: int, world_size: int, local: str, state: dict[str, Any], workers: int) -> Any:
    """The rest of the epoch a 2-process state stands in, on this one process."""
    loader = _loader(_mosaic(local, rank, world_size), workers)
    loader.set_epoch(1)
    loader.load_state_dict(state)
    return _epoch(loader)


@pytest.fixture(scope="module")
def tars(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_tars(str(tmp_path_factory.mktemp("webdataset")), SHARDS)


@pytest.fixture(scope="module")
def mds(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_mds(str(tmp_path_factory.mktemp("mds") / "ids"), sum(SHARDS), 24)


@pytest.fixture(scope="module")
def webdataset_runs(tars: list[str]) -> dict[int, list[dict[str, Any]]]:
    return {n: run_distributed(webdataset_scenarios, n, tars, timeout=BOUND, daemon=False) for n in (2, 3)}


@pytest.fixture(scope="module")
def mosaic_runs(mds: str) -> list[dict[str, Any]]:
    return run_distributed(mosaic_scenarios, 2, mds, timeout=BOUND, daemon=False)


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


@pytest.mark.parametrize("name", ["WebDataset0", "DataPipeline0", "WebDataset2", "DataPipeline2"])
def test_webdataset_split_by_node_reads_every_sample_once_an_epoch(
    webdataset_runs: dict[int, list[dict[str, Any]]], name: str
) -> None:
    ranks = webdataset_runs[2]
    for epoch in range(2):
        shares = [_flat(rank[name][epoch]) for rank in ranks]
        assert sorted(shares[0] + shares[1]) == list(range(96)), (
            "each process its own shards, none read twice"
        )
        assert len(ranks[0][name][epoch]) == len(ranks[1][name][epoch]) == 12


def test_webdataset_over_fewer_shards_per_process_pads_the_shorter_shares(
    webdataset_runs: dict[int, list[dict[str, Any]]],
) -> None:
    # NOTE: 4 shards on 3 processes: 48, 24 and 24 samples; the shorter shares restart to keep the step count.
    for name in ("WebDataset0", "DataPipeline0"):
        for epoch in range(2):
            shares = [_flat(rank[name][epoch]) for rank in webdataset_runs[3]]
            assert sorted(shares[0]) == list(range(24)) + list(range(72, 96))
            assert sorted(set(shares[1])) == list(range(24, 48)) and shares[1] == list(range(24, 48)) * 2
            assert sorted(set(shares[2])) == list(range(48, 72)) and len(shares[2]) == 48


@pytest.mark.parametrize("workers", [0, 2])
def test_webdataset_resumes_exactly_on_as_many_processes(
    webdataset_runs: dict[int, list[dict[str, Any]]], workers: int
) -> None:
    for rank in webdataset_runs[2]:
        run = rank[f"resumed{workers}"]
        assert run["head"] + run["tail"] == run["whole"] and len(run["head"]) == STOP


def test_webdataset_position_is_refused_on_fewer_processes(
    webdataset_runs: dict[int, list[dict[str, Any]]], tars: list[str]
) -> None:
    state = webdataset_runs[2][0]["resumed0"]["state"]
    alone = _loader(_webdataset(tars, "WebDataset"), 0)
    with pytest.raises(
        ValueError, match=r"saved mid-epoch by 2 processes.*webdataset's `split_by_node` gives"
    ):
        alone.load_state_dict(state)


def test_webdataset_batched_in_the_pipeline_reports_samples_not_batches(
    webdataset_runs: dict[int, list[dict[str, Any]]],
) -> None:
    """0.4.0 counted each batch a pipeline's ``.batched`` made as one sample: "24 samples read" for 96."""
    ranks = webdataset_runs[2]
    assert sorted(ranks[0]["batched"]["ids"] + ranks[1]["batched"]["ids"]) == list(range(96))
    for rank in ranks:
        assert "96 samples read (rank 0: 48, rank 1: 48)" in rank["batched"]["report"], rank["batched"]


def test_webdataset_without_a_node_splitter_keeps_its_own_error(
    webdataset_runs: dict[int, list[dict[str, Any]]],
) -> None:
    for rank in webdataset_runs[2]:
        assert "you need to add an explicit nodesplitter" in rank["unsplit"]


@pytest.mark.parametrize("workers", [0, 2])
def test_mosaic_reads_every_sample_once_an_epoch_in_a_new_order(
    mosaic_runs: list[dict[str, Any]], workers: int
) -> None:
    epochs = [[_flat(epoch) for epoch in rank[f"epochs{workers}"]] for rank in mosaic_runs]
    for epoch in range(2):
        assert sorted(epochs[0][epoch] + epochs[1][epoch]) == list(range(96))
    assert epochs[0][0] != epochs[0][1], "each epoch its own order"


@pytest.mark.parametrize("workers", [0, 2])
def test_mosaic_resumes_exactly_on_as_many_processes(mosaic_runs: list[dict[str, Any]], workers: int) -> None:
    for rank in mosaic_runs:
        run = rank[f"resumed{workers}"]
        assert run["head"] + run["tail"] == run["whole"] and len(run["head"]) == STOP
        assert run["state"]["library"]["sample_in_epoch"] == STOP * 4 * 2


def test_mosaic_is_handed_its_state_when_the_epoch_begins_not_when_it_is_loaded(
    mosaic_runs: list[dict[str, Any]],
) -> None:
    """A mid-epoch state replaced before any batch by one saved between epochs: the library reads the second's
    epoch whole (only the restore that applies reaches it, when its epoch begins)."""
    for rank in mosaic_runs:
        assert rank["replaced"]["read"] == rank["replaced"]["expected"]


@pytest.mark.parametrize("workers", [0, 2])
def test_mosaic_resumes_exactly_on_fewer_processes_through_its_own_state(
    mosaic_runs: list[dict[str, Any]], mds: str, workers: int
) -> None:
    runs = [rank[f"resumed{workers}"] for rank in mosaic_runs]
    (alone,) = run_distributed(
        mosaic_resumed_alone, 1, mds, runs[0]["state"], workers, timeout=BOUND, daemon=False
    )
    consumed = _flat(runs[0]["head"]) + _flat(runs[1]["head"])
    whole = _flat(runs[0]["whole"]) + _flat(runs[1]["whole"])
    assert sorted(consumed + _flat(alone)) == list(range(96)) == sorted(whole)


def test_mosaic_with_another_batch_size_than_the_loaders_is_refused(
    mosaic_runs: list[dict[str, Any]],
) -> None:
    for rank in mosaic_runs:
        assert "Build it with `batch_size=2`" in rank["other_batch_size"]
