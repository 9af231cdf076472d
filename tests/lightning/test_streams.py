"""Real 2-process ``lightning.Trainer`` fits over Hugging Face streams with uneven shards (docs/DESIGN.md,
"Streaming data"): no hang, nothing silently dropped, exact validation and predict, exact resume.

Each module fixture runs one scenario of ``tests/scripts/streams.py`` once; the tests read what every
process recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_app import read_records
from tests.helpers.runner import run_command, script

pytestmark = pytest.mark.lightning


def _scenario(tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp(f"streams_{name}")
    return out, run_command(script("streams", name, str(out)), timeout=300)


@pytest.fixture(scope="module")
def uneven(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _scenario(tmp_path_factory, "uneven")


def _train(records: list[dict[str, Any]]) -> list[list[list[int]]]:
    return [[ids for _, _, ids in rank["train"]] for rank in records]


def test_training_pads_the_shorter_share_and_says_so(uneven: tuple[Path, str]) -> None:
    out, output = uneven
    first, second = _train(read_records(out / "pad", "fit", 2))
    assert len(first) == len(second) == 8, "both take the longer share's 8 steps"
    assert sorted(i for ids in first for i in ids) == list(range(30)), "process 0's share, each id once"
    flat = [i for ids in second for i in ids]
    assert sorted(flat[:10]) == list(range(30, 40)) and flat[10:] == (flat[:10] * 2)[:18]
    assert (
        "stream: native, each process reads only its share (5 shards over 2 processes); uneven ends padded"
        in output
    )
    assert "stream epoch 0: 8 steps, 40 samples read (rank 0: 30, rank 1: 10), 18 padded" in output


def test_fewer_shards_than_processes_fall_back_to_striding(uneven: tuple[Path, str]) -> None:
    out, output = uneven
    steps = _train(read_records(out / "fewer", "fit", 2))
    ids = sorted(i for rank in steps for batch in rank for i in batch)
    # 13 ids in one shard on 2 processes of 4: 2 steps of 8, the last padded with 3 of the first ids.
    assert len(steps[0]) == len(steps[1]) == 2 and sorted(set(ids)) == list(range(13)) and len(ids) == 16
    assert output.count("because it has 1 shards for 2 processes") == 1, "rank 0 says why, once"


def test_validation_gathers_every_sample_once(uneven: tuple[Path, str]) -> None:
    for rank in read_records(uneven[0] / "pad", "fit", 2):
        gathered = [i for ids in rank["val"] for i in ids]
        assert sorted(gathered) == list(range(19)), "the padding batches of process 0 are dropped"
    local = [len(ids) for rank in read_records(uneven[0] / "pad", "fit", 2) for ids in rank["val_local"]]
    assert sum(local) > 19, "process 0 did pad (its share has 7 ids, process 1's 12)"


def test_even_batches_false_stops_at_the_shortest_and_reports_the_rest(uneven: tuple[Path, str]) -> None:
    out, output = uneven
    first, second = _train(read_records(out / "shortest", "fit", 2))
    assert len(first) == len(second) == 3
    seen = sum(len(ids) for ids in first + second)
    assert f"{40 - seen} samples of the other processes' shares were left unseen" in output
    assert f"{40 - seen} left unseen (all stopped at the shortest stream)" in output


@pytest.mark.parametrize("name, total", [("predict_native", 19), ("predict_strided", 37)])
def test_predict_sees_every_sample_once(uneven: tuple[Path, str], name: str, total: int) -> None:
    # NOTE: rank 0 returns what one process would (every process's predictions, in the stream's order).
    assert json.loads((uneven[0] / f"{name}_rank0.json").read_text()) == list(range(total))
    own = json.loads((uneven[0] / f"{name}_rank1.json").read_text())
    assert own and set(own) < set(range(total)), "rank 1 keeps its own part"


@pytest.mark.long
def test_resume_mid_epoch_while_a_share_pads_continues_exactly(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    out, output = _scenario(tmp_path_factory, "resume")
    full, stop, resume = (
        [rank["train"] for rank in read_records(out / run, "fit", 2)] for run in ("full", "stop", "resume2")
    )
    for rank in (0, 1):
        assert full[rank][:6] == stop[rank]
        assert full[rank][6:] == resume[rank], "workers, shuffle and padding position restored exactly"
    epochs = [[ids for epoch, _, ids in full[0] if epoch == e] for e in (0, 1)]
    assert epochs[0] != epochs[1], "the shuffled stream reorders each epoch"
    without = [rank["train"] for rank in read_records(out / "resume0", "fit", 2)]
    for rank in (0, 1):
        rest = [step for step in full[rank][6:] if step[0] == 0]
        assert [step for step in without[rank] if step[0] == 0] == rest, (
            "resumed with num_workers=0: the rest of the epoch is read with the saved 2 workers"
        )
    unworked = [[ids for epoch, _, ids in without[rank] if epoch == 1] for rank in (0, 1)]
    assert len(unworked[0]) == len(unworked[1])
    assert {i for rank in unworked for ids in rank for i in ids} == {i for ids in epochs[1] for i in ids} | {
        i for epoch, _, ids in full[1] if epoch == 1 for i in ids
    }, "the next epoch, read without workers, covers the stream"
    assert unworked[0] != [ids for epoch, _, ids in full[0] if epoch == 1], "and is read in another order"
    assert "rest of epoch 0 is read with 2 workers" in output
    assert "not resumable" not in output


@pytest.fixture(scope="module")
def unsaid_split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _scenario(tmp_path_factory, "unsaid_split")[0]


def _fit(out: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads((out / f"{name}_rank{rank}.json").read_text()) for rank in range(2)]


@pytest.mark.parametrize("name", ["labelled", "tagged", "late"])
def test_a_stream_splitting_itself_unsaid_stops_every_process_before_the_first_optimizer_step(
    unsaid_split: Path, name: str
) -> None:
    """0.4.0: 48 of 96 ids never trained, exit 0 (a label or tag shared by the first batches; a split after
    the first global batch)."""
    for rank in _fit(unsaid_split, name):
        assert (
            rank["error"] is not None and "does not yield the same stream on every process" in rank["error"]
        )
        assert rank["global_step"] == 0 and rank["trained"] == [], "stopped before any step"


def test_a_same_stream_masked_at_random_trains_every_id_once(unsaid_split: Path) -> None:
    ranks = _fit(unsaid_split, "masked")
    assert [rank["error"] for rank in ranks] == [None, None]
    assert sorted(ranks[0]["trained"] + ranks[1]["trained"]) == list(range(96))
