"""Runs the scripts of ``tests/scripts/`` in their own process group, killed on timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
"""The repository root: scripts run from there as modules (``python -m tests.scripts.NAME``)."""


def script(name: str, *args: str) -> list[str]:
    """The command that runs ``tests/scripts/NAME.py`` with ``args``."""
    return [sys.executable, "-m", f"tests.scripts.{name}", *args]


def run_scenario(name: str, out: Path, timeout: float = 240.0) -> str:
    """Run scenario ``name`` of ``tests/scripts/scenarios.py`` writing to ``out``; return its output."""
    return run_command(script("scenarios", name, str(out)), timeout)


def run_command(command: list[str], timeout: float, cwd: Path = ROOT) -> str:
    """Run ``command`` (and what it starts) in a new session; fail the test on error or timeout."""
    returncode, output = finish(command, timeout, cwd)
    if returncode != 0:
        pytest.fail(f"`{' '.join(command)}` failed ({returncode}):\n{output[-6000:]}")
    return output


def finish(command: list[str], timeout: float, cwd: Path = ROOT) -> tuple[int, str]:
    """Run ``command`` in a new session until every process holding its output has ended; fail on timeout.

    Returns its exit code and output. What it left running is killed.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "default"}
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        # NOTE: the output pipe closes when the last process holding it (every rank) has exited.
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process.pid)
        output, _ = process.communicate()
        pytest.fail(f"`{' '.join(command)}` hung for {timeout}s:\n{output[-6000:]}")
    finally:
        kill_group(process.pid)
    return process.returncode, output


def kill_group(pid: int) -> None:
    """End what is left of the process group this runner started (e.g. a second rank after a failure)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
