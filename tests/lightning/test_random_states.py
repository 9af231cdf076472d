"""Each process's random states saved by that process, on real processes (docs/DESIGN.md, "Random states
on resume", "Scale"): what process 0 writes does not grow with the number of processes, each process's
states come back bit for bit on as many processes, a checkpoint of 0.3.0 (every process's states gathered
in process 0's) still resumes exactly, and another number of processes starts afresh with the notice.

The fits are ``tests/scripts/random_states.py``. ``tests/data/random_states_0.3.0.ckpt`` is the
checkpoint after 3 steps of its uninterrupted fit on 2 processes, written by the code of commit b13025a
(before the states were saved per process): ``python -m tests.scripts.random_states 2 OUT``, then
``OUT/checkpoints/step=3.ckpt``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from lightning.fabric.plugins import TorchCheckpointIO

from lightning_shard.comm.random_states import GATHERED, own_part, own_state
from lightning_shard.lightning.random_state_files import (
    KEY,
    name_checkpoint,
    read_own,
    remove_others,
    write_own,
)
from tests.helpers.dist import run_distributed
from tests.helpers.runner import ROOT, run_command, script
from tests.scripts.random_states import STOP, states_digest

pytestmark = pytest.mark.lightning

FIXTURE = ROOT / "tests" / "data" / "random_states_0.3.0.ckpt"
WORLDS = (1, 2, 3)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[Path, str]]:
    """Each number of processes' run directory and output; 2 also resumes the 0.3.0 checkpoint, 3 also
    resumes the checkpoint of 2."""
    out = tmp_path_factory.mktemp("random_states")
    done = {}
    for world in WORLDS:
        extra = {2: ["--compat", str(FIXTURE)], 3: ["--elastic", str(_checkpoint(out / "2"))]}.get(world, [])
        output = run_command(script("random_states", str(world), str(out / str(world)), *extra), timeout=400)
        done[world] = (out / str(world), output)
    return done


def _checkpoint(run: Path) -> Path:
    return run / "checkpoints" / f"step={STOP}.ckpt"


def _records(run: Path, name: str, world: int) -> list[dict[str, Any]]:
    return [json.loads((run / name / f"fit_rank{rank}.json").read_text()) for rank in range(world)]


def _entry(run: Path) -> dict[str, Any]:
    return torch.load(_checkpoint(run), weights_only=True)["callbacks"][KEY]


def _size(value: Any) -> int:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return len(buffer.getvalue())


def test_process_0_writes_as_many_random_state_bytes_on_1_2_and_3_processes(runs: dict[int, Any]) -> None:
    entries = {world: _entry(runs[world][0]) for world in WORLDS}
    for world, entry in entries.items():
        assert (entry["version"], entry["world_size"], entry["rank"]) == (2, world, 0)
        assert "states" not in entry, "no other process's states in process 0's checkpoint"
    sizes = {world: _size(entry) for world, entry in entries.items()}
    assert len(set(sizes.values())) == 1, sizes
    assert sizes[1] < 20_000


def test_each_other_process_writes_only_its_own_states_beside_the_checkpoint(runs: dict[int, Any]) -> None:
    for world in WORLDS:
        folder = Path(f"{_checkpoint(runs[world][0])}.random_states")
        if world == 1:
            assert not folder.exists(), "one process writes no folder"
            continue
        assert sorted(path.name for path in folder.iterdir()) == [f"rank_{r}.pt" for r in range(1, world)]
        for rank in range(1, world):
            part = torch.load(folder / f"rank_{rank}.pt", weights_only=True)
            assert (part["version"], part["world_size"], part["rank"]) == (2, world, rank)
            assert _size(part) == _size(_entry(runs[world][0]))


def test_a_removed_checkpoint_takes_the_other_processes_states_with_it(runs: dict[int, Any]) -> None:
    """``save_top_k=1`` removed every checkpoint of ``latest/`` but the last, which ``last.ckpt`` links to."""
    for world in WORLDS:
        latest = runs[world][0] / "latest"
        kept = os.readlink(latest / "last.ckpt")
        names = {kept, "last.ckpt"} | ({f"{kept}.random_states"} if world > 1 else set())
        assert {path.name for path in latest.iterdir()} == names, f"{world} processes"


def test_each_process_draws_on_as_the_uninterrupted_fit_did(runs: dict[int, Any]) -> None:
    """On as many processes: each process's states at every resumed step, bit for bit, and so the weights.

    NOTE: the weights only up to 2 processes. From 3 gloo processes on, the first step of a freshly built
    `DistributedDataParallel` (a resume builds one) rounds its all-reduced gradients differently from the
    same step of a wrapper that has run before (a fresh wrapper over the same parameters mid-run, with
    no checkpoint at all, changes the weights of this model on 3 processes, not on 2); so the weights
    differ in their last bits however exact the random states, as they did before the states were saved
    per process.
    """
    for world in WORLDS:
        run = runs[world][0]
        full, resumed = _records(run, "full", world), _records(run, "resume", world)
        for rank in range(world):
            saved = _entry(run) if rank == 0 else torch.load(_part(run, rank), weights_only=True)
            assert resumed[rank]["states"][0] == states_digest(saved["state"]), (
                f"{world} processes, rank {rank}"
            )
            assert resumed[rank]["states"] == full[rank]["states"][STOP:], f"{world} processes, rank {rank}"
            if world <= 2:
                assert resumed[rank]["weights"] == full[rank]["weights"], f"{world} processes, rank {rank}"


def _part(run: Path, rank: int) -> Path:
    return Path(f"{_checkpoint(run)}.random_states") / f"rank_{rank}.pt"


def test_a_checkpoint_of_0_3_0_restores_each_processs_states(runs: dict[int, Any]) -> None:
    saved = torch.load(FIXTURE, weights_only=True)["callbacks"][KEY]
    assert (saved["version"], saved["world_size"], len(saved["states"])) == (GATHERED, 2, 2)
    run = runs[2][0]
    compat, resumed = _records(run, "compat", 2), _records(run, "resume", 2)
    for rank in range(2):
        assert compat[rank]["states"][0] == states_digest(saved["states"][rank]), f"rank {rank}"
        assert compat[rank]["train"] == resumed[rank]["train"], "the loader resumes where it stopped"
        assert len(compat[rank]["states"]) == len(resumed[rank]["states"])


def test_another_number_of_processes_starts_afresh_with_the_notice(runs: dict[int, Any]) -> None:
    run, output = runs[3]
    assert "random states were saved by 2 processes" in output
    assert all(record["train"] for record in _records(run, "elastic", 3))
    assert "not beside the checkpoint" not in output


# -- the files, on 2 gloo processes -------------------------------------------------------------------
def _files(rank: int, world: int, directory: str) -> dict[str, Any]:
    """Save as a strategy does, then read through a link, from a copy without the folder, and remove."""
    checkpoint_io, folder = TorchCheckpointIO(), Path(directory)
    path = folder / "step=3.ckpt"
    torch.manual_seed(rank)
    entry = own_part()
    name_checkpoint(entry, path)
    if rank == 0:
        checkpoint_io.save_checkpoint({KEY: entry}, path)
    write_own(checkpoint_io, path, entry)
    dist.barrier()
    if rank == 0:
        os.symlink("step=3.ckpt", folder / "last.ckpt")
        (folder / "moved").mkdir()
        shutil.copy(path, folder / "moved" / "copy.ckpt")
    dist.barrier()
    main = torch.load(path, weights_only=True)[KEY]
    results: dict[str, Any] = {"entry": states_digest(entry["state"])}
    results["link"] = states_digest(own_state(read_own(checkpoint_io, folder / "last.ckpt", main)) or {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results["moved"] = own_state(read_own(checkpoint_io, folder / "moved" / "copy.ckpt", main))
    results["warnings"] = [str(warning.message) for warning in caught]
    dist.barrier()
    remove_others(checkpoint_io, path, rank == 0)
    dist.barrier()
    results["left"] = sorted(name.name for name in folder.iterdir())
    return results


def test_the_files_are_found_through_a_link_missed_in_a_copy_and_removed(tmp_path: Path) -> None:
    zero, one = run_distributed(_files, 2, str(tmp_path))
    assert zero["link"] == zero["entry"] and one["link"] == one["entry"] != zero["entry"]
    assert zero["moved"] is not None and not zero["warnings"], "process 0's states are in the checkpoint"
    assert one["moved"] is None
    (warning,) = one["warnings"]
    assert "process 1's random states are not beside the checkpoint" in warning
    assert "copy.ckpt.random_states/rank_1.pt" in warning and "Copy or move" in warning
    assert one["left"] == ["last.ckpt", "moved", "step=3.ckpt"], "the folder goes with the checkpoint"
