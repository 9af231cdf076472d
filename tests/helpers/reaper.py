"""Ending every process a test started, wherever it went (``tests/helpers/runner.py``, ``tests/helpers/dist.py``).

A launch is started in a new session, so its process group holds the command, the ranks Lightning's
launchers start (they inherit the group), their ``DataLoader`` workers and the fork servers they use
(forked, same group): ``os.killpg`` ends all of them at once, also the ones whose parent has already
exited. A process that left the group on its own (``setsid``, ``start_new_session=True``: a nested
launcher, a daemonising tool) is out of reach of ``killpg``, and, once its parent has exited, of a walk
of the process tree too (it is re-parented). What it cannot leave is its environment: every launch puts
a variable of its own, ``LIGHTNING_SHARD_TEST_RUN_<token>``, in the environment of what it starts,
which every descendant inherits (``fork`` copies it; ``exec`` passes it on), and ``kill_marked`` finds
them by it in ``/proc/<pid>/environ``, whatever their session. (Without ``/proc``, only the group is killed.)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

MARK_PREFIX = "LIGHTNING_SHARD_TEST_RUN_"


def new_mark() -> str:
    """A fresh environment variable name marking one launch and everything it starts."""
    return f"{MARK_PREFIX}{uuid.uuid4().hex}"


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (ignored when it has already ended)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def marked(mark: str) -> list[int]:
    """The processes whose environment holds ``mark`` (this process excluded)."""
    needle = f"{mark}=".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # ended meanwhile, or another user's
            continue
        if needle in environ and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def alive(mark: str) -> list[str]:
    """``PID STATE COMMAND`` of each living process carrying ``mark`` (a zombie carries none: its environment
    is gone)."""
    found = []
    for pid in marked(mark):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):  # ended meanwhile
            continue
        found.append(f"{pid} {state} {command.strip()[:200]}")
    return found


def stacks(pids: list[int]) -> str:
    """The Python stacks of the processes ``pids``, as ``py-spy dump`` prints them (a hang's diagnosis); a
    line saying why where ``py-spy`` is missing or may not read a process."""
    spy = shutil.which(
        "py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    if spy is None:
        return "(no stacks: py-spy is not installed)"
    dumps = []
    for pid in pids:
        try:
            dump = subprocess.run(
                [spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
            )
            said = (
                dump.stdout if dump.returncode == 0 else dump.stderr.partition("\n")[0]
            )  # NOTE: not its trace
            dumps.append(f"--- {pid}\n{said}")
        except subprocess.TimeoutExpired:  # NOTE: a generous bound; a dump takes well under a second
            dumps.append(f"--- {pid}: py-spy took over 60 s")
    return "\n".join(dumps)


def kill_marked(mark: str) -> None:
    """SIGKILL every process carrying ``mark``, in any session."""
    for pid in marked(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def descendants(pid: int) -> list[int]:
    """The living descendants of ``pid`` (from the parent links in ``/proc``), children first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            # NOTE: the command name in field 2 may hold spaces and parentheses; the fields after its ")" do not.
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, frontier = [], [pid]
    while frontier:
        nxt = [child for parent in frontier for child in children.get(parent, [])]
        found += nxt
        frontier = nxt
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its living descendants (the ``DataLoader`` workers of a rank, say)."""
    for target in [*descendants(pid), pid]:
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass
