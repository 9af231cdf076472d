"""Real 4-process ``ShardModelParallelStrategy`` fits on CPU (gloo): data parallel 2 x tensor parallel 2,
the model tensor-parallel and FSDP2-sharded in ``configure_model`` (docs/DESIGN.md, "What the mesh decides").

One run of ``tests/scripts/model_parallel.py`` holds every fit (an uninterrupted one, two stopped and
resumed ones, a dispatched one); the tests read what each process recorded. Lightning's mesh is
``(data_parallel, tensor_parallel)`` in rank order, so ranks 0 and 1 form data-parallel index 0,
ranks 2 and 3 index 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_app import read_records
from tests.helpers.runner import run_command, script

pytestmark = pytest.mark.lightning

WORLD, TRAIN, VAL = 4, 22, 13
TP_GROUPS = ((0, 1), (2, 3))
LEADERS = (0, 2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("model_parallel")
    # NOTE: generous: 4 processes share 2 cores; a hang, not a slow machine, would reach it.
    return out, run_command(script("model_parallel", str(out)), timeout=420)


def _records(out: Path, run: str) -> list[dict[str, Any]]:
    return read_records(out / run, "fit", WORLD)


def _epoch_ids(records: list[dict[str, Any]], epoch: int) -> list[int]:
    return [i for rank in LEADERS for e, _, ids in records[rank]["train"] if e == epoch for i in ids]


@pytest.mark.parametrize("run", ["full", "dispatch"])
def test_tensor_parallel_peers_see_identical_batches(runs: tuple[Path, str], run: str) -> None:
    records = _records(runs[0], run)
    for first, second in TP_GROUPS:
        assert records[first]["train"] == records[second]["train"]
    assert records[0]["train"] != records[2]["train"]


def test_data_parallel_groups_are_disjoint_and_cover_the_data(runs: tuple[Path, str]) -> None:
    records = _records(runs[0], "full")
    for epoch in (0, 1):
        ids = _epoch_ids(records, epoch)
        # 22 samples, 2 data-parallel processes x 2 per step: 6 steps, the last padded with 2 samples.
        assert sorted(set(ids)) == list(range(TRAIN)) and len(ids) == 24
        steps = [[ids for e, _, ids in records[rank]["train"] if e == epoch] for rank in LEADERS]
        assert all(not set(a) & set(b) for a, b in list(zip(*steps, strict=True))[:-1])
    dispatched = _records(runs[0], "dispatch")
    ids = _epoch_ids(dispatched, 0)
    assert sorted(ids) == list(range(TRAIN)), "dispatch: each sample once, one slice per data-parallel index"


def test_scheduler_plan_and_datamodule_count_data_parallel_processes(runs: tuple[Path, str]) -> None:
    out, output = runs
    records = _records(out, "full")
    for step, lr in records[0]["lr"]:
        assert lr == pytest.approx(0.1 / (1 + 2 * step)), "step schedulers scaled by the data-parallel size"
    assert all(rank["sizes"] == [2, 4, 6] for rank in records), "num_processes, global batch, steps"
    plan = (
        "lightning_shard plan: 2 data-parallel processes of 4 ranks (shard), batch size 2 per process and 4 "
        "global, 6 optimizer steps per epoch, 2 samples padded in the last step, step schedulers x2 per "
        "optimizer step"
    )
    assert all(rank["plan"] == [plan] for rank in records)
    assert "lightning_shard plan: 2 data-parallel processes of 4 ranks (dispatch)" in output


def test_gather_for_metrics_gathers_each_data_parallel_index_once(runs: tuple[Path, str]) -> None:
    for rank in _records(runs[0], "full"):
        val = rank["val"]
        # 13 samples on 2 data-parallel indices of 2: the last global batch (1 sample) is merged with the
        # one before and split in real samples (balanced validation).
        assert [len(ids) for ids in val] == [4, 4, 5] * 2
        assert sorted(i for ids in val[:3] for i in ids) == list(range(VAL))


def test_audit_counts_each_batch_once(runs: tuple[Path, str]) -> None:
    audits = _records(runs[0], "full")[0]["audits"]
    assert audits == [
        f"shard audit, epoch {epoch}: 22 samples, 22 covered, 2 duplicates (2 allowed as padding), "
        "0 missing (0 allowed): OK"
        for epoch in (0, 1)
    ]


@pytest.mark.parametrize("kind", ["dcp", "file"])
def test_mid_epoch_resume_is_exact(runs: tuple[Path, str], kind: str) -> None:
    out, _ = runs
    full, stop, resume = (_records(out, run) for run in ("full", f"stop_{kind}", f"resume_{kind}"))
    for rank in range(WORLD):
        assert full[rank]["train"][:3] == stop[rank]["train"]
        assert full[rank]["train"][3:] == resume[rank]["train"], "continues at step 3 with the same samples"
        assert resume[rank]["lr"] == full[rank]["lr"][3:]
        # momentum (optimizer state) and weights restored: the end of training is the same, shard by shard
        assert resume[rank]["weights"] == pytest.approx(full[rank]["weights"], rel=1e-12, abs=1e-12)


def test_checkpoints_hold_the_loader_position(runs: tuple[Path, str]) -> None:
    out, _ = runs
    (directory,) = (out / "checkpoints_dcp").glob("*.ckpt")
    (file,) = (out / "checkpoints_file").glob("*.ckpt")
    assert directory.is_dir() and file.is_file(), "save_distributed_checkpoint=True writes a directory"
    for checkpoint in (
        torch.load(directory / "meta.pt", weights_only=False),
        torch.load(file, weights_only=False),
    ):
        (loader,) = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
        assert (loader["epoch"], loader["steps"], loader["consumed"]) == (0, 3, 6)
        assert (loader["num_processes"], loader["world_size"]) == (2, 4)
