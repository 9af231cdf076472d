"""Two nodes of one process each, on this machine, started by ``torchrun`` as a cluster would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.lightning_app import read_records
from tests.helpers.runner import ROOT, kill_group, run_command
from tests.helpers.torchrun import free_port

pytestmark = [pytest.mark.lightning, pytest.mark.long]


def _torchrun(node_rank: int, port: int, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(node_rank),
        "--master_addr", "127.0.0.1", "--master_port", str(port),
        "-m", "tests.scripts.multinode", str(out),
    ]  # fmt: skip


def test_two_nodes_shard_globally(tmp_path: Path) -> None:
    port = free_port()
    second = subprocess.Popen(
        _torchrun(1, port, tmp_path),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        output = run_command(_torchrun(0, port, tmp_path), timeout=180)
        assert second.wait(timeout=60) == 0
    finally:
        kill_group(second.pid)
    records = read_records(tmp_path, "fit", 2)
    # 30 samples over 2 nodes x 4 per step: 4 steps, the last padded with 2 samples.
    steps = list(zip(records[0]["train"], records[1]["train"], strict=True))
    assert len(steps) == 4
    assert all(not set(first[2]) & set(second[2]) for first, second in steps[:-1])
    assert sorted({i for first, second in steps for i in first[2] + second[2]}) == list(range(30))
    for step, lr in records[0]["lr"]:
        assert lr == pytest.approx(0.1 / (1 + 2 * step))
    assert "lightning_shard plan: 2 processes" in output
