"""Runs the scripts of ``tests/scripts/`` in their own process group, killed when they stop making progress.

A bound in a test detects a hang, not slowness (the machines running the suite are shared): ``finish``
kills a launch only when it has printed no new line for ``timeout`` seconds, so a launch of many
scenarios that prints a line per finished scenario (or Lightning's own lines per fit) may take as long
as the machine needs, while one that hangs is ended one bound after its last line. When the bound fires,
the test's failure shows every process's Python stack (``py-spy``, a test extra), and every process the
launch started is killed, in whatever session it ended up (``tests/helpers/reaper.py``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests.helpers.reaper import alive, kill_group, kill_marked, marked, new_mark, stacks

ROOT = Path(__file__).parents[2]
"""The repository root: scripts run from there as modules (``python -m tests.scripts.NAME``)."""


def script(name: str, *args: str) -> list[str]:
    """The command that runs ``tests/scripts/NAME.py`` with ``args``."""
    return [sys.executable, "-m", f"tests.scripts.{name}", *args]


def run_scenario(name: str, out: Path, timeout: float = 240.0) -> str:
    """Run scenario ``name`` of ``tests/scripts/scenarios.py`` writing to ``out``; return its output."""
    return run_command(script("scenarios", name, str(out)), timeout)


def run_command(command: list[str], timeout: float, cwd: Path = ROOT) -> str:
    """Run ``command`` (and what it starts) in a new session; fail the test on error or on a hang."""
    returncode, output = finish(command, timeout, cwd)
    if returncode != 0:
        pytest.fail(f"`{' '.join(command)}` failed ({returncode}):\n{output[-6000:]}")
    return output


class _Lines:
    """Reads a stream line by line on a thread; ``wait`` returns once it closed, or after ``idle`` seconds
    without a new line."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self.closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self.closed = True
            self._changed.notify_all()

    def wait(self, idle: float) -> bool:
        """``True`` once the stream has closed; ``False`` after ``idle`` seconds without a new line."""
        with self._changed:
            while not self.closed:
                if not self._changed.wait_for(self._grown(len(self.lines)), timeout=idle):
                    return False
        return True

    def _grown(self, count: int) -> Callable[[], bool]:
        return lambda: self.closed or len(self.lines) > count

    def text(self) -> str:
        self._thread.join(timeout=10)  # NOTE: after a kill the pipe closes at once; the bound is only a guard
        with self._changed:
            return "".join(self.lines)


def finish(
    command: list[str], timeout: float, cwd: Path = ROOT, base_env: Mapping[str, str] | None = None
) -> tuple[int, str]:
    """Run ``command`` in a new session until every process holding its output has ended; fail the test
    when it printed nothing for ``timeout`` seconds (a hang).

    Returns its exit code and output. Whatever it started and left running is killed, on success too.
    ``base_env``: the environment to start from (default: this process's).
    """
    ended = run_to_end(command, timeout, cwd, base_env)
    return ended.returncode, ended.output


@dataclass(frozen=True)
class Ended:
    """A launch that ended: its exit code, its output, and what it left alive (killed since)."""

    returncode: int
    output: str
    left: list[str]
    """Each process of the launch (``PID STATE COMMAND``) still alive once its command had exited and every
    process holding its output had ended."""


def run_to_end(
    command: list[str], timeout: float, cwd: Path = ROOT, base_env: Mapping[str, str] | None = None
) -> Ended:
    """``finish``, which also says what the launch left alive."""
    mark = new_mark()
    base = os.environ if base_env is None else base_env
    env = {**base, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "default", mark: "1"}
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    assert process.stdout is not None
    start = time.monotonic()
    try:
        # NOTE: the output pipe closes when the last process holding it (every rank) has exited.
        output = _Lines(process.stdout)
        ended = output.wait(timeout)
        if ended:
            # NOTE: a command may close its output before it exits (GNU `cp` does, at exit): let it finish
            # before what is left is killed, or its exit status becomes -9 (seen under load).
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=timeout)
        left = alive(mark)
        where = "" if ended else stacks(marked(mark))
    finally:
        kill_all(process.pid, mark)
    text = output.text()
    if not ended:
        spent = time.monotonic() - start
        pytest.fail(
            f"`{' '.join(command)}` hung: no output for {timeout}s (after {spent:.0f}s); alive then: {left}"
            f"\n{text[-6000:]}\nwhere each process was:\n{where[-20000:]}"
        )
    return Ended(process.wait(), text, left)


def kill_all(pid: int, mark: str) -> None:
    """End what is left of a launch: its process group (ranks, ``DataLoader`` workers, fork servers) and
    every process carrying its ``mark``, also one that started a session of its own."""
    kill_group(pid)
    kill_marked(mark)
