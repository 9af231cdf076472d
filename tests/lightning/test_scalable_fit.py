"""``scalable_shuffle`` under Lightning (docs/DESIGN.md, "Scale"): the plan line says so, and a mid-epoch
checkpoint of a 2-process fit resumes exactly on 2 and on 1 process (``tests/scripts/scalable.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_shard.comm.topology import Topology
from lightning_shard.lightning import ShardStrategy
from lightning_shard.lightning.plan import plan_for
from lightning_shard.lightning.schedulers import SchedulerScaling
from lightning_shard.options import ShardOptions
from lightning_shard.prepare import prepare_with_options
from lightning_shard.sampling.permutation import KeyedPermutation
from tests.helpers.lightning_app import loader
from tests.helpers.runner import run_command, script
from tests.scripts.scalable import BATCH, DATA_SEED, LENGTH, STOP_AT


def test_the_plan_line_says_the_order_is_the_keyed_one() -> None:
    options = ShardOptions(scalable_shuffle=True)
    shard = prepare_with_options(loader(50, 4, shuffle=True), options, Topology(2, 1))
    plan = plan_for(
        shard, SchedulerScaling(True, False, 2), num_training_batches=7, accumulate_grad_batches=1
    )
    assert plan.scalable_shuffle and str(plan).endswith(
        "; scalable shuffle: keyed order of (data_seed, epoch), not RandomSampler's"
    )
    plain = prepare_with_options(loader(50, 4, shuffle=True), ShardOptions(), Topology(2, 1))
    plan = plan_for(
        plain, SchedulerScaling(True, False, 2), num_training_batches=7, accumulate_grad_batches=1
    )
    assert not plan.scalable_shuffle and "scalable" not in str(plan)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scalable")
    for phase in ("two", "one"):
        run_command(script("scalable", phase, str(out)), timeout=400)
    return out


def _steps(run: Path) -> list[list[list[Any]]]:
    """Per process: ``[epoch, batch_idx, ids]`` of each training step."""
    return [json.loads(path.read_text())["train"] for path in sorted(run.glob("fit_rank*.json"))]


def _global_order(steps: list[list[list[Any]]], epoch: int) -> list[int]:
    """The ids of ``epoch`` step by step, processes in order within a step: the global batches joined."""
    per_rank = [[ids for e, _, ids in rank if e == epoch] for rank in steps]
    return [i for step in zip(*per_rank, strict=True) for ids in step for i in ids]


@pytest.mark.lightning
@pytest.mark.long
@pytest.mark.parametrize("devices", [2, 1])
def test_a_mid_epoch_checkpoint_resumes_the_keyed_order_exactly(runs: Path, devices: int) -> None:
    whole = [
        KeyedPermutation(LENGTH, DATA_SEED, epoch).at(torch.arange(LENGTH)).tolist() for epoch in range(2)
    ]
    before = _global_order(_steps(runs / "stop2"), 0)
    assert before == whole[0][: STOP_AT * 2 * BATCH], "2 processes read one keyed order"
    resumed = _steps(runs / f"resume2to{devices}")
    assert len(resumed) == devices
    after = _global_order(resumed, 0)
    rest = whole[0][len(before) :]
    assert after[: len(rest)] == rest, "the rest of the epoch, in the same order"
    padding = after[len(rest) :]
    assert padding == whole[0][: len(padding)], "padded from the start of the epoch's order"
    assert _global_order(resumed, 1)[:LENGTH] == whole[1], "the next epoch: the keyed order of epoch 1"


def test_a_datamodule_turns_it_on_for_training_only() -> None:
    from lightning_shard.lightning import ShardDataModule

    class Data(ShardDataModule):
        shard_stage_options = {"train": {"scalable_shuffle": True}}  # noqa: RUF012 - the documented form

    data = Data()
    assert data._train_options().scalable_shuffle
    assert not ShardOptions().replace(**data.shard_options("validate")).scalable_shuffle
    assert ShardStrategy(scalable_shuffle=True).options.scalable_shuffle
