"""Everyday Trainer features with ``ShardStrategy`` on 2 processes stay exact: the runs are
``tests/scripts/everyday.py``; each test reads what every process trained on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.runner import run_command, script

pytestmark = [pytest.mark.lightning, pytest.mark.long]


@pytest.fixture(scope="module")
def everyday(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("everyday")
    return out, run_command(script("everyday", str(out)), timeout=400)


def _records(out: Path, run: str) -> list[dict[str, Any]]:
    return [json.loads((out / run / f"fit_rank{rank}.json").read_text()) for rank in (0, 1)]


def _epochs(out: Path, run: str) -> dict[tuple[int, int], list[list[int]]]:
    """``(epoch, rank)``: the ids of each step."""
    steps: dict[tuple[int, int], list[list[int]]] = {}
    for rank, record in enumerate(_records(out, run)):
        for epoch, _, ids in record["train"]:
            steps.setdefault((epoch, rank), []).append(ids)
    return steps


def test_reloaded_loaders_resume_into_the_same_epochs(everyday: tuple[Path, str]) -> None:
    out = everyday[0]
    full, stop, resume = (_epochs(out, f"reload/{run}") for run in ("full", "stop", "resume"))
    for rank in (0, 1):
        assert stop[(1, rank)] + resume[(1, rank)] == full[(1, rank)], "the resumed epoch continues"
        assert resume[(2, rank)] == full[(2, rank)], "the epoch after it is the uninterrupted run's"
    assert full[(2, 0)] != full[(1, 0)], "each reloaded epoch has an order of its own"


def test_a_second_fit_continues_the_epochs(everyday: tuple[Path, str]) -> None:
    out = everyday[0]
    full, twice = _epochs(out, "twice/full"), _epochs(out, "twice/twice")
    assert twice == full, "fit 2 epochs then up to 4 on one trainer equals one fit of 4 epochs"
    assert full[(2, 0)] != full[(0, 0)]


def test_loaders_without_a_batch_size_train(everyday: tuple[Path, str]) -> None:
    out = everyday[0]
    per_sample = _epochs(out, "no_batch_size/per_sample")
    for epoch in (0, 1):
        ids = per_sample[(epoch, 0)] + per_sample[(epoch, 1)]
        assert all(len(step) == 1 for step in ids), "one uncollated sample per step"
        assert sorted(i for step in ids for i in step) == [0, *range(13)], "13 samples, 1 padded"
    custom = _epochs(out, "no_batch_size/custom")
    assert sorted(i for steps in custom.values() for step in steps for i in step) == list(range(20))
    assert [len(step) for step in custom[(0, 0)]] == [3, 2, 1, 3, 2] and [len(s) for s in custom[(0, 1)]] == [
        1,
        3,
        2,
        1,
        2,
    ]


def test_gathering_in_training_drops_the_padding_and_refuses_at_the_epoch_end(
    everyday: tuple[Path, str],
) -> None:
    first, second = _records(everyday[0], "gather")
    assert (
        first["gathered"] == second["gathered"] == [list(range(8)), list(range(8, 16)), list(range(16, 22))]
    )
    (message,) = first["refused"]
    assert "outside a training / validation / test step" in message and 'even_batches="balanced"' in message


def test_a_schedule_sized_by_optimizer_steps_is_reported(everyday: tuple[Path, str]) -> None:
    out, output = everyday
    assert "(WARNING: OneCycleLR ends after 10 of 20 scheduler steps: it ends early)" in output
    assert "Size it with `total_steps=self.trainer.strategy.estimated_scheduler_steps`" in output
    assert output.count("OneCycleLR ends after") == 2, "once in the plan line, once as a warning"
    assert _records(out, "horizon/trainer")[0]["schedule"] == [10]
    assert _records(out, "horizon/strategy")[0]["schedule"] == [20], "sized by the strategy: 2 epochs x 5 x 2"


def test_use_distributed_sampler_false_leaves_the_loaders_alone(everyday: tuple[Path, str]) -> None:
    out, output = everyday
    plain = _epochs(out, "opt_out/plain")
    assert [sorted(i for step in plain[(0, rank)] for i in step) for rank in (0, 1)] == [list(range(40))] * 2
    own = _epochs(out, "opt_out/own")
    assert [sorted(i for step in own[(0, rank)] for i in step) for rank in (0, 1)] == [
        list(range(0, 40, 2)),
        list(range(1, 40, 2)),
    ], "the user's own DistributedSampler shards, and is not refused"
    assert output.count("loaders left as they are (`Trainer(use_distributed_sampler=False)`)") == 3


def test_a_datamodule_whose_loaders_are_left_alone_reports_what_they_read(everyday: tuple[Path, str]) -> None:
    """``split_batches=True`` does not apply to loaders left whole: each process reads its own 32 per step,
    64 in all, and so ``global_batch_size`` says (it once said 32)."""
    out = everyday[0]
    sized = _epochs(out, "opt_out/sized")
    assert [[len(step) for step in sized[(0, rank)]] for rank in (0, 1)] == [[32] * 5] * 2
    assert all(record["sizes"] == [2, 64, 5] for record in _records(out, "opt_out/sized"))
