"""Resume in every direction (docs/DESIGN.md, "Elastic resume"): mid-epoch checkpoints resumed on more and
on fewer processes, with another worker count, with several training loaders, and written while
validation runs inside an epoch. The fits are ``tests/scripts/resume.py``; each test reads what every
process trained on."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.runner import run_command, script

pytestmark = [pytest.mark.lightning, pytest.mark.long]

LENGTH, BATCH, STOP_AT = 50, 4, 3


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("resume")
    for phase in ("one", "two", "three", "back", "fewer"):
        run_command(script("resume", phase, str(out)), timeout=400)
    return out


def _records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(run.glob("fit_rank*.json"))]


def _steps(run: Path) -> list[list[list[Any]]]:
    """Per process: ``[epoch, batch_idx, ids]`` of each training step."""
    return [record["train"] for record in _records(run)]


def _ids(steps: list[list[list[Any]]], epoch: int) -> list[int]:
    return [i for rank in steps for e, _, ids in rank if e == epoch for i in ids]


@pytest.mark.parametrize(
    ("mode", "saved", "devices", "global_batch"),
    [
        ("shard", 1, 2, 8),
        ("shard", 2, 3, 12),
        ("shard", 3, 2, 8),
        ("split", 2, 3, 12),
        ("dispatch", 2, 3, 12),
        ("stream", 2, 3, 12),
    ],
)
def test_a_mid_epoch_checkpoint_continues_on_another_number_of_processes(
    runs: Path, mode: str, saved: int, devices: int, global_batch: int
) -> None:
    name = "back" if saved == 3 else mode
    stopped, resumed = _steps(runs / name / f"stop{saved}"), _steps(runs / name / f"resume{saved}to{devices}")
    assert len(resumed) == devices
    before, after = _ids(stopped, 0), _ids(resumed, 0)
    counts = Counter(before + after)
    assert sorted(counts) == list(range(LENGTH)), "every sample of the epoch, none lost"
    rest = LENGTH - len(before)
    steps = -(-rest // global_batch)
    # The end-of-epoch padding of the new count is the only repeat (dispatch pads to a multiple of N rows).
    padding = -rest % devices if mode == "dispatch" else steps * global_batch - rest
    assert sum(counts.values()) - LENGTH == padding
    for rank in resumed:
        batch_indices = [batch_idx for epoch, batch_idx, _ in rank if epoch == 0]
        assert batch_indices == list(range(STOP_AT, STOP_AT + steps)), "Lightning's batch counter continues"
    assert set(_ids(resumed, 1)) == set(range(LENGTH)), "the next epoch runs whole on the new count"
    assert len({len([step for step in rank if step[0] == 1]) for rank in resumed}) == 1
    scale = {"saved": 1 if mode == "split" else saved, "now": 1 if mode == "split" else devices}
    per_epoch = -(-LENGTH // global_batch)
    end = json.loads((runs / name / f"resume{saved}to{devices}" / "end.json").read_text())["schedule"]
    assert end == STOP_AT * scale["saved"] + (steps + per_epoch) * scale["now"], (
        "the scheduler scales by each count"
    )


def test_a_split_batch_the_new_count_cannot_divide_is_refused_at_setup(runs: Path) -> None:
    message = (runs / "split8" / "refused" / "error.txt").read_text()
    assert (
        "`split_batches=True` needs the batch size (8) to be a multiple of the number of processes (3)"
        in message
    )
    assert "Use a batch size of 6 or 9, or set `split_batches=False`" in message


def test_another_worker_count_resumes_exactly(runs: Path) -> None:
    full, stopped, resumed = (_steps(runs / "workers" / run) for run in ("full", "stop2", "resume2to2"))
    for rank in (0, 1):
        assert stopped[rank] + resumed[rank] == full[rank], "saved with 0 workers, resumed with 2"


def test_a_stream_resumed_with_another_worker_count_finishes_its_epoch_exactly(runs: Path) -> None:
    """Saved with 2 workers, resumed with none: the rest of epoch 0 is read with 2 workers as the
    uninterrupted fit read it; epoch 1 is read without workers (ids in order, strided over 2 processes)."""
    root = runs / "stream_workers"
    full, stopped, resumed = (_steps(root / run) for run in ("full", "stop2", "resume2to2"))
    ordered = [[list(range(8 * t + 4 * rank, 8 * t + 4 * rank + 4)) for t in range(6)] for rank in (0, 1)]
    ordered[0].append([48, 49, 0, 1])  # NOTE: the last global batch is padded from the epoch's first
    ordered[1].append([2, 3, 4, 5])
    for rank in (0, 1):
        first = [step for step in full[rank] if step[0] == 0]
        assert len(stopped[rank]) == STOP_AT
        assert stopped[rank] + [step for step in resumed[rank] if step[0] == 0] == first
        assert first != [[0, t, ids] for t, ids in enumerate(ordered[rank])], "2 workers read another order"
        assert [ids for epoch, _, ids in resumed[rank] if epoch == 1] == ordered[rank]


@pytest.mark.parametrize("mode", ["max_size_cycle", "min_size"])
def test_several_training_loaders_resume_what_training_consumed(runs: Path, mode: str) -> None:
    name = f"several_{mode}"
    full, stopped, resumed = (_steps(runs / name / run) for run in ("full", "stop", "resume"))
    for rank in (0, 1):
        assert len(stopped[rank]) == STOP_AT + 1
        assert stopped[rank] + resumed[rank] == full[rank], "each loader continues after what was consumed"


@pytest.mark.parametrize("mode", ["max_size_cycle", "min_size"])
@pytest.mark.parametrize(("devices", "early"), [(1, False), (1, True), (3, True)])
def test_several_loaders_resumed_on_another_count_run_the_next_epoch_whole(
    runs: Path, mode: str, devices: int, early: bool
) -> None:
    """``a``: 24 samples in batches of 3, ``b``: 14 in 2s, saved on 2 processes after 3 steps (a whole epoch
    there: 4 steps of each); ``early``: the loaders built before Lightning restores the fit loop."""
    root = runs / f"pair_{mode}"
    stopped = _records(root / "stop")
    resumed = _records(root / f"resume{devices}{'_early' if early else ''}")
    combine = max if mode == "max_size_cycle" else min
    rest = combine(-(-2 // devices), -(-1 // devices))  # a has 2 of its 8 batches left, b 1 of 7
    per_epoch = combine(-(-8 // devices), -(-7 // devices))
    for rank in resumed:
        assert [step[1] for step in rank["train"] if step[0] == 0] == list(range(STOP_AT, STOP_AT + rest))
        assert [steps for epoch, steps in rank["epochs"] if epoch == 1] == [per_epoch], "measured whole"
        assert len([step for step in rank["train"] if step[0] == 1]) == per_epoch
    before = [step for record in stopped for step in record["train"]]
    after = [step for record in resumed for step in record["train"]]

    def ids(steps: list[Any], epoch: int, key: str) -> list[int]:
        return [i for e, _, batch in steps if e == epoch for i in batch[key]]

    assert set(ids(before, 0, "b") + ids(after, 0, "b")) == set(range(14)), "the resumed epoch loses nothing"
    assert set(ids(after, 1, "b")) == set(range(14)), "the next epoch of the shorter loader is whole"
    a = ids(after, 1, "a")
    assert len(a) == per_epoch * 3 * devices
    if mode == "max_size_cycle":
        assert set(ids(before, 0, "a") + ids(after, 0, "a")) == set(range(24))
        assert set(a) == set(range(24)), "the next epoch of the longer loader is whole"
    else:
        assert len(set(a)) == min(len(a), 24), "no sample of the longer loader twice"


def test_a_loader_built_before_the_restore_goes_on_in_the_checkpoints_order(runs: Path) -> None:
    """2 -> 1 with the loader Lightning builds before it restores the fit loop (``configure_optimizers``
    reads ``estimated_stepping_batches``) and rebuilds after: the reload at the next epoch continues the
    rebuilt loader's random stream, so that epoch's order is the one a loader built after the restore
    reads, under another global seed too."""
    late, early = (_steps(runs / "shard" / f"resume2to1_{name}")[0] for name in ("late", "early"))
    orders = [[ids for epoch, _, ids in steps if epoch == 1] for steps in (late, early)]
    assert sorted(i for ids in orders[0] for i in ids) == list(range(LENGTH)), "the next epoch is whole"
    assert orders[1] == orders[0], "the next epoch drew another order"


@pytest.mark.parametrize("kind", ["monitored", "every"])
def test_a_checkpoint_written_around_validation_resumes_exactly(runs: Path, kind: str) -> None:
    full = _records(runs / "validation" / "full")
    resumed = _records(runs / "validation" / f"resume_{kind}")
    for rank in (0, 1):
        assert full[rank]["train"][4:] == resumed[rank]["train"], "training continues after step 4"
        # 22 validation samples on 2 processes: 3 balanced steps per validation run.
        first = resumed[rank]["val"][:3]
        assert sorted(i for ids in first for i in ids) == list(range(22)), "the first validation is whole"
        assert resumed[rank]["val"] == full[rank]["val"][-len(resumed[rank]["val"]) :]
