"""Feature pairs that each worked alone and lost or repeated data together (docs/DESIGN.md, "Combination
harness"): each test is one combination found from outside, run for real (``tests/scripts/combinations.py``)
and compared with its uninterrupted run."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.runner import run_command, script

pytestmark = pytest.mark.lightning

LENGTH, STOP_AT = 50, 3


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("combinations")
    for phase in ("estimated", "subclass", "stream_stop", "stream_resume"):
        run_command(script("combinations", phase, str(out)), timeout=400)
    return out


def _records(run: Path, name: str = "fit") -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(run.glob(f"{name}_rank*.json"))]


@pytest.mark.long
@pytest.mark.parametrize(
    "name", ["estimated_onecycle", "estimated_onecycle_lightning", "estimated_model_parallel"]
)
def test_a_schedule_sized_from_the_estimated_steps_resumes_exactly(runs: Path, name: str) -> None:
    """``configure_optimizers`` reading the estimated step count makes Lightning build the training loader
    before the checkpoint is restored; the resumed fit must still continue where the stopped one ended."""
    full, stopped, resumed = (_records(runs / name / run) for run in ("full", "stop", "resume"))
    assert len(full) == 2
    for rank in (0, 1):
        assert len(stopped[rank]["train"]) == STOP_AT
        assert stopped[rank]["train"] + resumed[rank]["train"] == full[rank]["train"], "same ids, same order"
        assert stopped[rank]["lr"] + resumed[rank]["lr"] == full[rank]["lr"], "the OneCycleLR continues"
    epoch0 = [i for record in full for epoch, _, ids in record["train"] if epoch == 0 for i in ids]
    assert set(epoch0) == set(range(LENGTH))


@pytest.mark.long
def test_a_dataloader_subclass_keeps_its_class_and_behaviour(runs: Path) -> None:
    """Training and predict loaders stay the user's class with its attributes; its ``__iter__`` runs."""
    mine, plain = _records(runs / "subclass" / "train"), _records(runs / "subclass" / "plain")
    for rank in (0, 1):
        assert mine[rank]["loader"] == ["DataLoaderShardOfReversedLoader", "kept"]
        reversed_steps = [[e, b, ids[::-1]] for e, b, ids in plain[rank]["train"]]
        assert mine[rank]["train"] == reversed_steps, "the subclass's __iter__ reversed each sharded batch"
    predicted_mine = _records(runs / "subclass" / "train", "predict_records")
    predicted_plain = _records(runs / "subclass" / "plain", "predict_records")
    ids = []
    for rank in (0, 1):
        assert predicted_mine[rank]["predict_loader"] == ["ReversedLoader", "kept"]
        assert predicted_mine[rank]["predict"] == [ids[::-1] for ids in predicted_plain[rank]["predict"]]
        ids += [i for batch in predicted_mine[rank]["predict"] for i in batch]
    assert sorted(ids) == list(range(LENGTH - 3)), "every sample predicted once"


@pytest.mark.long
def test_a_stream_its_workers_split_moves_to_more_processes_mid_epoch_without_loss(runs: Path) -> None:
    """31 ids, 2 workers, batch 2: 3 steps on 2 processes, then the rest on 3 processes, in the epoch's order."""
    root = runs / "stream"
    full, stopped, resumed = (_records(root / run) for run in ("full", "stop", "resume"))
    assert len(resumed) == 3

    def order(records: list[dict[str, Any]], epoch: int) -> list[int]:
        per_rank = [[ids for e, _, ids in record["train"] if e == epoch] for record in records]
        return [i for step in zip(*per_rank, strict=True) for ids in step for i in ids]

    before, after = order(stopped, 0), order(resumed, 0)
    assert len(before) == STOP_AT * 4
    uninterrupted = order(full, 0)
    rest = 31 - len(before)
    assert before == uninterrupted[: len(before)]
    assert after[:rest] == uninterrupted[len(before) : 31], "the rest of the epoch, in the epoch's order"
    counts = Counter(before + after)
    assert sorted(counts) == list(range(31)), "no sample lost"
    assert sum(counts.values()) - 31 == -rest % 6, "only the new count's end-of-epoch padding repeats"
    assert sorted(Counter(order(resumed, 1))) == list(range(31)), "the next epoch runs whole on 3"


@pytest.mark.long
def test_fabric_epochs_left_early_still_move_on(tmp_path: Path) -> None:
    """Breaking out of each epoch after a few batches: each epoch is the start of the whole epoch's order
    (a new order each epoch), and the saved state is in the epoch reached."""
    run_command(script("combinations", "fabric_break", str(tmp_path)), timeout=300)
    for record in _records(tmp_path, "fabric"):
        whole, broken = record["whole"], record["broken"]
        assert [epoch[:STOP_AT] for epoch in whole] == broken
        assert len({json.dumps(epoch) for epoch in broken}) == 3, "a new order each epoch"
        assert record["whole_state_epoch"] == 3 and record["broken_state_epoch"] == 2


@pytest.mark.long
def test_a_misspelled_stage_key_is_refused_at_set_up_on_every_rank(tmp_path: Path) -> None:
    run_command(script("combinations", "misspelled", str(tmp_path)), timeout=300)
    for rank in (0, 1):
        message = (tmp_path / f"refused_rank{rank}.txt").read_text()
        assert "`shard_stage_options` has the key 'val', which is not a stage" in message
        assert "did you mean 'validate'" in message
    assert not list(tmp_path.glob("fit_rank*.json")), "no rank trained"


@pytest.mark.long
def test_the_seed_constructor_gives_a_stateful_loader_on_every_process(tmp_path: Path) -> None:
    run_command(
        script("launch", "2", "tests.scripts.combinations", "stateful_constructor", str(tmp_path)),
        timeout=300,
    )
    for rank in (0, 1):
        record = json.loads((tmp_path / f"stateful_rank{rank}.json").read_text())
        assert record["stateful"]
        assert record["head"] + record["rest"] == record["whole"]
        assert record["whole"][0] == [2 * rank, 2 * rank + 1]


FITS = int(os.environ.get("EXIT_STATUS_FITS", "3"))
"""Fits run back to back: 3 here (one of each kind), 20 in ``make test-matrix`` (benchmarks/RELIABILITY.md)."""


def test_finished_fits_exit_zero_on_every_process(tmp_path: Path) -> None:
    """Each rank is a direct child of the launcher, so an abort at interpreter exit shows as its status."""
    kinds = ("map", "stream", "dispatch")
    for fit in range(FITS):
        kind = kinds[fit % len(kinds)]
        output = run_command(
            script("launch", "2", "tests.scripts.exit_status", kind, str(tmp_path / str(fit))), timeout=300
        )
        assert "rank 0 exited with 0" in output and "rank 1 exited with 0" in output, (kind, output[-2000:])
        assert "terminate called" not in output
