"""The user's own sampler under a real 2-process ``Trainer`` (docs/DESIGN.md, "The user's own sampler"),
and a resumed fit equal to the uninterrupted one bit for bit ("Random states on resume"). The fits are
``tests/scripts/own_sampler.py``; each test reads what every process trained on and its final weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.runner import run_command, script
from tests.scripts.own_sampler import ACCUMULATE, LENGTH, MID_WINDOW, SAMPLERS, STOP

# NOTE: `long`: the module's fits take a minute and a half on 2 cores; `make test` covers the user's own
# samplers a process index at a time (`tests/loaders/test_own_sampler.py`) and in fits, through the sampler
# axis of the matrix's daily sample.
pytestmark = [pytest.mark.lightning, pytest.mark.long]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("own_sampler")
    for phase in ("two", "one", "three", "model_parallel", "fabric"):
        run_command(script("own_sampler", phase, str(out)), timeout=400)
    return out


def _records(run: Path, name: str = "fit") -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(run.glob(f"{name}_rank*.json"))]


def _batches(record: dict[str, Any]) -> list[list[int]]:
    return [step[-1] for step in record["train"]]


def _global_order(records: list[dict[str, Any]], epoch: int) -> list[list[int]]:
    """The epoch's batches in global order: step 0 of every process, then step 1, ..."""
    steps = [[step[2] for step in record["train"] if step[0] == epoch] for record in records]
    return [batch for step in zip(*steps, strict=True) for batch in step]


@pytest.mark.parametrize("kind", SAMPLERS)
def test_a_fit_resumed_with_the_users_sampler_continues_the_uninterrupted_one(runs: Path, kind: str) -> None:
    full, resumed = (_records(runs / kind / name) for name in ("full2", "resume"))
    for rank in range(2):
        assert _batches(resumed[rank]) == _batches(full[rank])[STOP[kind] :], f"rank {rank}"
        assert resumed[rank]["weights"] == full[rank]["weights"]


@pytest.mark.parametrize("kind", SAMPLERS)
def test_two_processes_train_on_the_one_process_order(runs: Path, kind: str) -> None:
    """Every batch of the sampler once per epoch, dealt out in its order: no round lost, no sampler replaced."""
    (one,) = _records(runs / kind / "full1")
    two = _records(runs / kind / "full2")
    for epoch in range(2):
        alone = [step[2] for step in one["train"] if step[0] == epoch]
        together = _global_order(two, epoch)
        # NOTE: the epoch's last batch may be completed from the epoch's start, as the reference pads.
        assert together[: len(alone) - 1] == alone[:-1]
        assert together[len(alone) - 1][: len(alone[-1])] == alone[-1]
        assert len(together) - len(alone) < 2, "at most one batch completes the last round"
    ids = {index for batch in alone for index in batch}
    if kind == "filtering":
        assert ids == set(range(0, LENGTH, 2)), "the subclass's filter holds"
    elif kind != "weighted":
        assert ids == set(range(LENGTH))


@pytest.mark.parametrize("kind", SAMPLERS)
def test_len_is_what_the_epoch_yields(runs: Path, kind: str) -> None:
    for record in _records(runs / kind / "full2"):
        steps = [sum(step[0] == epoch for step in record["train"]) for epoch in range(2)]
        assert record["lengths"] == steps


@pytest.mark.parametrize("name", ["ddp", "model_parallel", "model_parallel_dcp"])
def test_a_resumed_fit_with_dropout_ends_with_the_uninterrupted_weights(runs: Path, name: str) -> None:
    full, resumed = _records(runs / name / "full"), _records(runs / name / "resume")
    assert len(full) == len(resumed) == 2
    for before, after in zip(full, resumed, strict=True):
        assert _batches(after) == _batches(before)[-len(after["train"]) :]
        assert after["weights"] == before["weights"], "bit for bit"


def test_on_three_processes_a_resumed_fit_trains_the_same_batches_to_weights_within_rounding(
    runs: Path,
) -> None:
    """docs/guides/resume.md, "What exact covers": on 3 processes the gradient all-reduce adds 3 values in an
    order a resume does not keep, so the weights may differ in their last bits (as plain DDP's do)."""
    full, resumed = _records(runs / "ddp3" / "full"), _records(runs / "ddp3" / "resume")
    assert len(full) == len(resumed) == 3
    for before, after in zip(full, resumed, strict=True):
        assert _batches(after) == _batches(before)[-len(after["train"]) :]
        pairs = zip(_weights(before), _weights(after), strict=True)
        difference = max(abs(a - b) for a, b in pairs)
        assert difference < 1e-6, f"{difference}: more than the rounding of the all-reduce"


def _weights(record: dict[str, Any]) -> list[float]:
    return [float.fromhex(value) for value in record["weights"]]


@pytest.mark.parametrize("kind", ["at_step", "mid_window"])
def test_with_accumulation_only_a_checkpoint_at_an_optimizer_step_resumes_bit_for_bit(
    runs: Path, kind: str
) -> None:
    """Lightning saves no accumulated gradient: a checkpoint written mid-window resumes the data exactly, but
    the window's optimizer step then sums only the gradients of the batches after it."""
    full, resumed = _records(runs / "accumulate" / "full"), _records(runs / "accumulate" / f"resume_{kind}")
    first = 2 * ACCUMULATE if kind == "at_step" else MID_WINDOW + 1
    plan = (
        "3 batches accumulated per optimizer step: a checkpoint resumes bit for bit only at an optimizer step"
    )
    assert plan in full[0]["plan"][0], "the plan line says which checkpoints resume bit for bit"
    for before, after in zip(full, resumed, strict=True):
        assert _batches(after) == _batches(before)[first:], "the data resumes exactly"
        if kind == "at_step":
            assert after["weights"] == before["weights"], "bit for bit"
        else:
            assert after["weights"] != before["weights"], "the gradient of batches 3 and 4 is lost"
            assert _weights(after) == pytest.approx(_weights(before), abs=0.5), (
                "a small change, not a wrong fit"
            )


def test_a_fabric_run_resumed_with_dropout_ends_with_the_uninterrupted_weights(runs: Path) -> None:
    for rank in range(2):
        full, resumed = (_records(runs / "fabric", name)[rank] for name in ("full", "resume"))
        assert resumed["train"] == full["train"][-len(resumed["train"]) :]
        assert resumed["weights"] == full["weights"]


@pytest.mark.parametrize(
    "checkpoint",
    ["ddp/checkpoints/step=5.ckpt", "fabric/stop.ckpt", "model_parallel_dcp/checkpoints/step=5.ckpt"],
)
def test_the_saved_random_states_load_with_weights_only(runs: Path, checkpoint: str) -> None:
    """Process 0's in the checkpoint (a file, or ``meta.pt`` in a directory), process 1's beside it or in it."""
    path = runs / checkpoint
    saved = torch.load(path / "meta.pt" if path.is_dir() else path, weights_only=True)
    states = saved["callbacks"] if "callbacks" in saved else saved
    folder = path / "random_states" if path.is_dir() else Path(f"{path}.random_states")
    parts = [states["lightning_shard.random_states"], torch.load(folder / "rank_1.pt", weights_only=True)]
    for rank, part in enumerate(parts):
        assert (part["world_size"], part["rank"]) == (2, rank)
        assert {"torch", "python", "numpy"} <= set(part["state"])
