"""The multi-machine guide's ``train.py`` under ``srun`` (docs/guides/multi-machine.md, "SLURM"), without
SLURM: two processes on this machine, each given the variables ``srun --nodes=1 --ntasks-per-node=2``
sets for its task, by hand."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import DOCS, blocks, files
from tests.helpers.reaper import kill_group
from tests.helpers.runner import ROOT, finish

pytestmark = pytest.mark.lightning

PAGE = DOCS / "guides" / "multi-machine.md"
BOUND = 240.0
"""Seconds without output after which a task counts as hung: a 2-process fit of 8 steps prints as it goes."""


def _job_id() -> str:
    """A job id whose last 4 digits give a free port: Lightning's ``SLURMEnvironment`` listens on 15000 + them."""
    for digits in range(4000, 10000, 7):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", 15000 + digits))
            except OSError:
                continue
        return f"73{digits:04d}"
    raise RuntimeError("no free port between 19000 and 25000")


def _task(rank: int, job_id: str) -> dict[str, str]:
    """The environment of task ``rank`` of 2 on one node, as ``srun`` sets it (and nothing of torchrun's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK"):
        env.pop(name, None)
    env.update(
        SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2", SLURM_NNODES="1", SLURM_NODEID="0",
        SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), SLURM_JOB_ID=job_id, SLURM_JOB_NAME="train",
        SLURM_NODELIST="localhost", SLURM_JOB_NODELIST="localhost",
        # NOTE: `python train.py` runs from the page's directory: the checkout's package, not an installed one.
        PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
    )  # fmt: skip
    return env


def _srun(where: Path) -> str:
    """``srun python train.py`` on one node of 2 tasks; rank 0's output (both must succeed)."""
    job_id = _job_id()
    command = [sys.executable, "train.py"]
    second = subprocess.Popen(
        command,
        cwd=where,
        env=_task(1, job_id),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        returncode, output = finish(command, BOUND, cwd=where, base_env=_task(0, job_id))
        assert returncode == 0, output[-6000:]
        assert second.wait(timeout=BOUND) == 0, "task 1 failed"
    finally:
        kill_group(second.pid)
    return output


def test_the_guides_train_py_runs_under_srun_and_its_requeue_restores_last(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(files(blocks(PAGE))["train.py"])
    first = _srun(tmp_path)
    assert "lightning_shard plan: 2 processes (shard), batch size 8 per process and 16 global" in first
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
    again = _srun(tmp_path)
    assert f"Restored all states from the checkpoint at {tmp_path / 'checkpoints' / 'last.ckpt'}" in again
