"""Real 2-process ``lightning.Trainer`` runs with ``ShardStrategy`` on CPU (gloo).

Each module fixture runs one scenario of ``tests/scripts/scenarios.py`` once; the tests read what every
process recorded (the dataset returns its index, the module stores the ids of each step).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_app import read_records
from tests.helpers.runner import run_scenario

pytestmark = pytest.mark.lightning


def _scenario(tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp(name)
    return out, run_scenario(name, out)


@pytest.fixture(scope="module")
def basic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _scenario(tmp_path_factory, "basic")


def _epoch_ids(records: list[dict[str, Any]], epoch: int) -> list[int]:
    return [i for rank in records for e, _, ids in rank["train"] if e == epoch for i in ids]


def test_training_sees_every_sample_each_epoch(basic: tuple[Path, str]) -> None:
    records = read_records(basic[0], "fit", 2)
    for epoch in (0, 1):
        ids = _epoch_ids(records, epoch)
        # 50 samples, 2 processes x 4 per step: 7 steps, the last one padded with 6 samples.
        assert sorted(set(ids)) == list(range(50))
        assert len(ids) == 56
    first = [ids for _, _, ids in records[0]["train"][:7]]
    second = [ids for _, _, ids in records[0]["train"][7:]]
    assert first != second, "the shuffled order must change between epochs"
    assert all(len(ids) == 4 for rank in records for _, _, ids in rank["train"])


def test_step_scheduler_steps_once_per_process(basic: tuple[Path, str]) -> None:
    records = read_records(basic[0], "fit", 2)
    for step, lr in records[0]["lr"]:
        assert lr == pytest.approx(0.1 / (1 + 2 * step))
    assert records[0]["lr"] == records[1]["lr"]


def test_validation_and_test_gather_every_sample_once(basic: tuple[Path, str]) -> None:
    fit = read_records(basic[0], "fit", 2)
    test = read_records(basic[0], "test", 2)
    for rank in (0, 1):
        val = fit[rank]["val"]
        assert [len(ids) for ids in val] == [16] * 6 + [7] + [16] * 6 + [7]
        assert sorted(i for ids in val[:7] for i in ids) == list(range(103))
        assert sorted(i for ids in test[rank]["test"] for i in ids) == list(range(103))
    local = [[len(ids) for ids in rank["val_local"][:7]] for rank in fit]
    assert local == [[8] * 6 + [4], [8] * 6 + [3]], "the last step is split into real samples, none repeated"


def test_predict_yields_each_sample_once_with_its_indices(basic: tuple[Path, str]) -> None:
    written = [json.loads((basic[0] / f"predict_rank{rank}.json").read_text()) for rank in (0, 1)]
    ids = [i for rank in written for _, predicted in rank["batches"] for i in predicted]
    assert sorted(ids) == list(range(37))
    for rank in written:
        assert all(indices == predicted for indices, predicted in rank["batches"])
        assert rank["epoch_indices"] == [indices for indices, _ in rank["batches"]]
        assert rank["epoch_predictions"] == [predicted for _, predicted in rank["batches"]]


def test_plan_is_logged_once_and_kept(basic: tuple[Path, str]) -> None:
    out, output = basic
    plan = (
        "lightning_shard plan: 2 processes (shard), batch size 4 per process and 8 global, 7 optimizer "
        "steps per epoch, 6 samples padded in the last step, step schedulers x2 per optimizer step"
    )
    assert output.count(plan) == 1
    assert read_records(out, "fit", 2)[1]["plan"] == [plan]
    assert "DistributedSampler" not in output


@pytest.fixture(scope="module")
def modes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _scenario(tmp_path_factory, "modes")


def test_split_batches(modes: tuple[Path, str]) -> None:
    records = read_records(modes[0] / "split", "fit", 2)
    for step, lr in records[0]["lr"]:
        assert lr == pytest.approx(0.1 / (1 + step))
    ids = _epoch_ids(records, 0)
    assert sorted(set(ids)) == list(range(50)) and len(ids) == 56
    for first, second in zip(records[0]["train"], records[1]["train"], strict=True):
        assert len(first[2]) == len(second[2]) == 4 and not set(first[2]) & set(second[2])
    assert [len(ids) for ids in records[0]["val"]] == [8] * 12 + [7]
    assert sorted(i for ids in records[0]["val"] for i in ids) == list(range(103))
    assert "x1 per optimizer step (split_batches)" in modes[1]


def test_uneven_training_is_refused(modes: tuple[Path, str]) -> None:
    message = (modes[0] / "uneven" / "error.txt").read_text()
    assert "`even_batches=False`" in message and "[7, 6]" in message and "drop_last=True" in message
    assert '`even_batches="balanced"`' in message


def test_dispatch_without_padding_trains_every_sample_once(modes: tuple[Path, str]) -> None:
    records = read_records(modes[0] / "dispatch_uneven", "fit", 2)
    assert [len(record["train"]) for record in records] == [6, 6], "12 batches: 6 steps each"
    ids = _epoch_ids(records, 0)
    assert sorted(ids) == list(range(46)), "every sample once: the last global batch is not padded"
    assert [len(record["train"][-1][2]) for record in records] == [4, 2]


def test_dispatch_iterable_dataset(modes: tuple[Path, str]) -> None:
    out, output = modes
    records = read_records(out / "dispatch", "fit", 2)
    steps = list(zip(records[0]["train"], records[1]["train"], strict=True))[:6]
    assert len(records[0]["train"]) == 12
    for step, (first, second) in enumerate(steps[:-1]):
        assert first[2] == list(range(8 * step, 8 * step + 4))
        assert second[2] == list(range(8 * step + 4, 8 * step + 8))
    # 45 samples: the last global batch has 5 rows, completed to 6 with the first sample of the epoch.
    assert steps[-1][0][2] + steps[-1][1][2] == [40, 41, 42, 43, 44, 0]
    assert "(dispatch)" in output and "1 samples padded" in output
    # NOTE: the first of the scenario's two dispatch fits (the second is `dispatch_uneven`'s).
    dispatch_plan = [line for line in output.splitlines() if "plan: 2 processes (dispatch)" in line][0]
    assert "scheduler" not in dispatch_plan, "an interval='epoch' scheduler is not scaled: nothing to say"
    # StepLR(gamma=0.5) with interval="epoch" steps once after each epoch's last batch, unscaled.
    assert [lr for _, lr in records[0]["lr"]] == pytest.approx([0.1] * 5 + [0.05] * 6 + [0.025])


def test_datamodule_sizes_a_one_cycle_schedule(tmp_path_factory: pytest.TempPathFactory) -> None:
    out, output = _scenario(tmp_path_factory, "datamodule")
    records = read_records(out, "fit", 2)
    # 7 batches per process, 2 per optimizer step: 4 steps per epoch, the schedule advancing 2 per step.
    assert records[0]["sizes"] == [2, 8, 4, 16]
    assert records[0]["schedule_end"] == [16], "OneCycleLR ends exactly at total_steps"
    assert [len(ids) for ids in records[0]["val"]] == [8] * 12 + [7] + [8] * 12 + [7]
    assert sorted(i for ids in records[0]["val"][:13] for i in ids) == list(range(103))
    assert "4 optimizer steps per epoch" in output


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out, output = _scenario(tmp_path_factory, "resume")
    return out, output + run_scenario("resume_elastic", out)


def _steps(out: Path, run: str, world_size: int) -> list[list[Any]]:
    return [rank["train"] for rank in read_records(out / run, "fit", world_size)]


def test_resume_continues_exactly(resumed: tuple[Path, str]) -> None:
    out, output = resumed
    full, stop, resume = _steps(out, "full", 2), _steps(out, "stop", 2), _steps(out, "resume2", 2)
    for rank in (0, 1):
        assert len(stop[rank]) == 3
        assert full[rank][:3] == stop[rank]
        assert full[rank][3:] == resume[rank], "the resumed run continues at step 3 with the same samples"
    lrs = [rank["lr"] for rank in read_records(out / "resume2", "fit", 2)]
    assert lrs[0] == read_records(out / "full", "fit", 2)[0]["lr"][3:]
    assert "not resumable" not in output
    # A checkpoint written after the resume saves what was consumed, as the uninterrupted run's would
    # (Lightning before 2.5 ran one step behind here; docs/DESIGN.md, "Supported versions").
    full_saved, resumed_saved = _saved(out, "full", 2), _saved(out, "resume2", 2)
    assert all(resumed_saved[rank] == full_saved[rank][3:] for rank in (0, 1))
    _check_saved_positions(full_saved[0])


def _saved(out: Path, run: str, world_size: int) -> list[list[list[int]]]:
    """Per rank, ``[epoch, batch_idx, saved epoch, saved steps]`` after each training step."""
    return [rank["saved"] for rank in read_records(out / run, "fit", world_size)]


def _check_saved_positions(saved: list[list[int]]) -> None:
    """Each saved position is the steps taken in the epoch; after its last step, the next epoch's start."""
    for (epoch, batch_idx, saved_epoch, steps), following in zip(saved, [*saved[1:], None], strict=True):
        last = following is None or following[0] != epoch
        assert (saved_epoch, steps) == ((epoch + 1, 0) if last else (epoch, batch_idx + 1))


def test_elastic_resume_sees_each_unseen_sample_once(resumed: tuple[Path, str]) -> None:
    out, _ = resumed
    seen = [i for rank in _steps(out, "stop", 2) for _, _, ids in rank for i in ids]
    (single,) = _steps(out, "resume1", 1)
    rest = [i for epoch, _, ids in single if epoch == 0 for i in ids]
    assert sorted(rest) == sorted(set(range(50)) - set(seen))
    assert len(rest) == len(set(rest))
    assert [batch_idx for epoch, batch_idx, _ in single if epoch == 0] == list(range(3, 10))
    assert sorted(i for epoch, _, ids in single if epoch == 1 for i in ids) == list(range(50))
    (saved,) = _saved(out, "resume1", 1)
    assert saved[0] == [0, 3, 0, 4], "the first step on 1 process is the 4th of the epoch, also when saved"
    _check_saved_positions(saved)


def test_checkpoint_holds_inner_states(resumed: tuple[Path, str]) -> None:
    (path,) = (resumed[0] / "checkpoints").glob("*.ckpt")
    checkpoint = torch.load(path, weights_only=False)
    (optimizer,) = checkpoint["optimizer_states"]
    assert set(optimizer) == {"state", "param_groups"}
    (scheduler,) = checkpoint["lr_schedulers"]
    assert scheduler["last_epoch"] == 6, "3 optimizer steps on 2 processes step the schedule 6 times"
    (loader,) = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert (loader["epoch"], loader["steps"], loader["consumed"]) == (0, 3, 6)


def test_resume_with_read_ahead_stream(tmp_path_factory: pytest.TempPathFactory) -> None:
    out, output = _scenario(tmp_path_factory, "resume_stream")
    full, stop, resume = _steps(out, "full", 2), _steps(out, "stop", 2), _steps(out, "resume2", 2)
    for rank in (0, 1):
        assert full[rank][:2] == stop[rank] and full[rank][2:] == resume[rank]
    full_saved, resumed_saved = _saved(out, "full", 2), _saved(out, "resume2", 2)
    assert all(resumed_saved[rank] == full_saved[rank][2:] for rank in (0, 1))
    assert Counter(len(ids) for rank in full for _, _, ids in rank) == Counter({4: 24})
    assert "not resumable" not in output
