"""Exact evaluation (docs/DESIGN.md, "Exact evaluation"): unchanged user code gives on 2 and 3 processes
exactly what one process gives, with torchmetrics, ``self.log(sync_dist=True)``, ``gather_for_metrics``
anywhere and ``trainer.predict``. The runs are ``tests/scripts/evaluation.py``, on 103 validation samples in
batches of 8 (no whole number of global batches on 2 or 3 processes)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from torch.utils.data import BatchSampler, SequentialSampler

from lightning_shard import BatchSamplerShard
from tests.helpers.runner import run_command, script

pytestmark = pytest.mark.lightning

LENGTH = 103


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    out = tmp_path_factory.mktemp("evaluation")
    for devices in (1, 2, 3):
        run_command(script("evaluation", str(devices), str(out)), timeout=300)
    return {devices: json.loads((out / f"{devices}.json").read_text()) for devices in (1, 2, 3)}


@pytest.mark.parametrize("devices", [2, 3])
def test_torchmetrics_and_sync_dist_logging_equal_one_process(runs: dict[int, Any], devices: int) -> None:
    single, sharded = runs[1], runs[devices]
    assert single["validate"]["mean"] == 51.0 and single["validate"]["sum"] == 5253.0
    assert sharded["validate"] == single["validate"], "mean, sum, accuracy, AUROC, batch mean / sum"
    assert sharded["test"] == single["test"] == {"test_mean": 51.0}
    assert sorted(sharded["cat"]) == single["cat"], "CatMetric holds every sample once (in process order)"


@pytest.mark.parametrize("devices", [1, 2, 3])
def test_gather_for_metrics_in_the_step_and_at_the_epoch_end(runs: dict[int, Any], devices: int) -> None:
    run = runs[devices]
    assert sorted(run["epoch_ids"]) == list(range(LENGTH)), "gathered once at the epoch's end"
    assert run["step_dicts"] == [{"id": i, "name": f"s{i}"} for i in range(LENGTH)], (
        "lists of dicts, in order"
    )
    assert sorted(run["dataloader_iter"]) == list(range(LENGTH)), "a step that takes `dataloader_iter`"
    # Each step gathers the first 1 + rank ids of every process: rows differ per process.
    shards = [_balanced_batches(devices, rank) for rank in range(devices)]
    expected = [
        i for step in zip(*shards, strict=True) for rank, ids in enumerate(step) for i in ids[: 1 + rank]
    ]
    assert run["step_ragged"] == expected


def _balanced_batches(devices: int, rank: int) -> list[list[int]]:
    """What a balanced validation loader gives process ``rank``, straight from the core."""
    batches = BatchSampler(SequentialSampler(range(LENGTH)), 8, drop_last=False)
    return list(BatchSamplerShard(batches, devices, rank, even_batches="balanced" if devices > 1 else False))


@pytest.mark.parametrize("devices", [2, 3])
def test_predictions_come_back_on_rank_0_in_order(runs: dict[int, Any], devices: int) -> None:
    single, sharded = runs[1], runs[devices]
    assert [i for batch in single["predict"] for i in batch] == list(range(37))
    assert sharded["predict"] == single["predict"], "the batches one process predicts, in its order"
    assert sharded["predict_split"] == single["predict_split"], "split batches joined again"
    predictions, indices = sharded["written"]
    assert predictions == single["predict"] and indices == single["predict"], "the writer's merged file"
