"""Real ``lightning.Trainer`` fits over torchdata.nodes pipelines and over training iterables that are not a
``DataLoader`` (docs/DESIGN.md, "torchdata.nodes", "Iterables left as they are"): every id once per epoch on
2 and 3 processes, with and without ``ParallelMapper`` workers; a fit killed mid-epoch and resumed on 2
processes goes on exactly as the uninterrupted one, and on 1 and 3 reads every id it had not once; an iterable
read whole by every process is stopped before the first step. The scenarios run in
``tests/scripts/nodes_fits.py``; the tests read what the processes recorded."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "torchdata.nodes", reason="torchdata.nodes needs torchdata 0.10 or later (`make test-oldest` has 0.8)"
)

from tests.helpers.lightning_app import read_records  # noqa: E402
from tests.helpers.runner import finish, run_command, script  # noqa: E402
from tests.scripts.nodes_fits import BATCH, LENGTH  # noqa: E402

pytestmark = pytest.mark.lightning

TIMEOUT = 300.0
"""Seconds without an output line before a launch counts as hung (each fit prints its plan)."""
SHARDED = ("sequential", "shuffled_workers", "seedable_workers", "stream")


@pytest.fixture(scope="module", params=[2, 3])
def fitted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    devices = request.param
    out = tmp_path_factory.mktemp(f"nodes_fits{devices}")
    return out, devices, run_command(script("nodes_fits", "fits", str(out), str(devices)), TIMEOUT)


def _epochs(out: Path, devices: int) -> list[list[list[int]]]:
    """Per epoch, per rank, the ids trained in order."""
    records = read_records(out, "fit", devices)
    return [
        [[i for epoch_, _, ids in rank["train"] if epoch_ == epoch for i in ids] for rank in records]
        for epoch in (0, 1)
    ]


@pytest.mark.parametrize("name", SHARDED)
def test_every_id_is_trained_once_per_epoch(fitted: tuple[Path, int, str], name: str) -> None:
    out, devices, output = fitted
    epochs = _epochs(out / name, devices)
    for ranks in epochs:
        assert sorted(i for rank in ranks for i in rank) == list(range(LENGTH)), name
        assert len({len(rank) for rank in ranks}) == 1, "every process takes as many steps"
    if name != "sequential" and name != "stream":
        assert epochs[0] != epochs[1], "a new order each epoch"
    assert f"lightning_shard plan: {devices} processes (shard), batch size {BATCH} per process" in output


def test_the_plan_names_the_graph(fitted: tuple[Path, int, str]) -> None:
    output = fitted[2]
    assert (
        "torchdata.nodes `Loader(ParallelMapper(Batcher(ParallelMapper(SamplerWrapper(RandomSampler)))))`, "
        "sharded through its root" in output
    )
    assert (
        "stream: strided, every process reads the whole stream (it does not implement `n_shards` and "
        "`shard(num_shards, index)`); torchdata.nodes `Loader(" in output
    )


def test_a_weighted_sampler_given_the_rank_is_passed_through(fitted: tuple[Path, int, str]) -> None:
    out, devices, output = fitted
    trained = [
        [i for _, _, ids in rank["train"] for i in ids]
        for rank in read_records(out / "weighted", "fit", devices)
    ]
    for rank, ids in enumerate(trained):
        assert ids and all(i % devices == rank % devices for i in ids), "each process reads its own part"
    assert (
        f"left as it is: `Loader` (its `MultiNodeWeightedSampler` splits itself (rank 0 of {devices}))"
        in output
    )


def test_iterables_split_by_rank_or_declared_whole_go_on_untouched(fitted: tuple[Path, int, str]) -> None:
    out, devices, output = fitted
    by_rank = _epochs(out / "by_rank", devices)
    assert all(sorted(i for rank in ranks for i in rank) == list(range(LENGTH)) for ranks in by_rank)
    whole = _epochs(out / "declared_whole", devices)
    assert all(rank == list(range(LENGTH)) for ranks in whole for rank in ranks), "read whole, as declared"
    assert "left as it is: `Batches` (not a `DataLoader` nor a recognised pipeline)" in output
    assert (
        "left as it is: `Whole` (it declares `splits_by_rank = False`: every process reads all of it)"
        in output
    )


def test_the_same_batches_on_every_process_stop_every_process_before_a_step(
    fitted: tuple[Path, int, str],
) -> None:
    out, devices, _ = fitted
    for rank in range(devices):
        path = out / "same" / f"failure_rank{rank}.json"
        if not path.exists():
            continue  # NOTE: Lightning may end a process while it raises the same error as the others.
        failure = json.loads(path.read_text())
        assert failure["error"] == "ValueError", failure
        assert failure["message"].startswith("The training iterable `Batches` is not a `DataLoader`")
        seen = "(a dict {'id': a tensor of shape (4,) [0, 1, 2, 3], 'x': a tensor of shape (4, 4)"
        assert f"every one of the {devices} processes read the same first batch {seen}" in failure["message"]
    assert (out / "same" / "failure_rank0.json").exists()
    assert not (out / "same" / "fit_rank0.json").exists(), "no fit ended"
    assert not list((out / "same").glob("steps_rank*.jsonl")), "no step was taken"


# -- a fit killed mid-epoch, then resumed ------------------------------------------------------------------
def _steps(run: Path, rank: int) -> list[dict[str, Any]]:
    path = run / f"steps_rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nodes_kill")
    run_command(script("nodes_fits", "whole", str(out)), TIMEOUT)
    returncode, output = finish(script("nodes_fits", "kill", str(out)), TIMEOUT)
    assert returncode != 0, output[-3000:]
    return out


def _checkpoint_step(out: Path) -> int:
    return max(int(path.stem.split("=")[1]) for path in (out / "kill" / "checkpoints").glob("*.ckpt"))


def test_a_killed_fit_resumed_on_2_processes_goes_on_as_the_uninterrupted_one(killed: Path) -> None:
    run_command(script("nodes_fits", "restart", str(killed), "2"), TIMEOUT)
    step = _checkpoint_step(killed)
    assert 0 < step < LENGTH // (2 * BATCH), "killed mid-epoch 0"
    for rank in (0, 1):
        before = [s["ids"] for s in _steps(killed / "kill", rank) if s["step"] <= step]
        after = [s["ids"] for s in _steps(killed / "restart2", rank)]
        assert before + after == [s["ids"] for s in _steps(killed / "whole", rank)], rank


@pytest.mark.long
@pytest.mark.parametrize("devices", [1, 3])
def test_a_killed_fit_resumed_on_another_number_of_processes_reads_every_id_left_once(
    killed: Path, devices: int
) -> None:
    run_command(script("nodes_fits", "restart", str(killed), str(devices)), TIMEOUT)
    step = _checkpoint_step(killed)
    before = [
        i for rank in (0, 1) for s in _steps(killed / "kill", rank) if s["step"] <= step for i in s["ids"]
    ]
    after = [s for rank in range(devices) for s in _steps(killed / f"restart{devices}", rank)]
    epoch0 = before + [i for s in after if s["epoch"] == 0 for i in s["ids"]]
    counts = Counter(epoch0)
    assert sorted(counts) == list(range(LENGTH)), "every id of the resumed epoch"
    padded = sum(counts.values()) - LENGTH
    assert padded < devices * BATCH and all(count <= 2 for count in counts.values()), (
        "only the last step pads"
    )
    epoch1 = sorted(i for s in after if s["epoch"] == 1 for i in s["ids"])
    assert sorted(set(epoch1)) == list(range(LENGTH)) and len(epoch1) - LENGTH < devices * BATCH


def test_the_kill_was_a_kill(killed: Path) -> None:
    assert (killed / "kill" / "signalled.json").exists()
    assert signal.SIGKILL  # NOTE: rank 1 killed itself with it (`Stop`), after its step 5
