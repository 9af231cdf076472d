"""``torchrun`` agents on this machine, as the nodes of a cluster: started, found and ended by the tests.

Each agent runs in a session of its own and carries a mark of its own (``tests/helpers/reaper.py``); its
workers run in yet another session (torch starts them so), so killing an agent's process group leaves
them running: ``Agent.kill`` kills everything carrying the agent's mark, in any session.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO

from tests.helpers.reaper import kill_group, kill_marked, new_mark
from tests.helpers.runner import ROOT


def free_port() -> int:
    """A TCP port nothing listens on now (the OS's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Agent:
    """One ``torchrun`` agent running ``command`` (its arguments after the launcher's), logging to ``log``."""

    def __init__(self, launcher: list[str], command: list[str], log: Path, env: dict[str, str]) -> None:
        self.mark = new_mark()
        self.log = log
        self._output: IO[str] = log.open("w")
        environment = {**os.environ, "OMP_NUM_THREADS": "1", **env, self.mark: "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", *launcher, *command],
            cwd=ROOT,
            env=environment,
            stdout=self._output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL the agent and its workers, wherever they run."""
        kill_group(self.pid)
        kill_marked(self.mark)
        self.process.wait()
        self._output.close()

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def listening_pid(port: int, pids: list[int]) -> int | None:
    """Which of ``pids`` listens on TCP ``port`` (the agent hosting a c10d rendezvous' store), if any."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # NOTE: 0A is LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        if inodes & _sockets(pid):
            return pid
    return None


def _sockets(pid: int) -> set[str]:
    links = set()
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return links
    for descriptor in descriptors:
        try:
            links.add(os.readlink(descriptor))
        except OSError:  # NOTE: closed meanwhile
            continue
    return links
