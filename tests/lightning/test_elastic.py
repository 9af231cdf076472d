"""Elastic ``torchrun`` (docs/guides/multi-machine.md): two agents on this machine as two nodes of a c10d
rendezvous (``--nnodes=1:3 --max-restarts=3``), each running ``tests/scripts/elastic.py``, a Lightning fit
with ``ShardStrategy(use_seedable_sampler=True, data_seed=0)`` that checkpoints every step and resumes from
``last.ckpt``. Mid-epoch, once every worker holds after step ``HOLD_AT`` (it says so by writing a file),
the test changes the group: it kills one agent and its workers (the other re-rendezvouses alone: 2 -> 1),
starts a third agent (the group restarts on 3: 2 -> 3), or kills one worker (2 -> 2).

Each worker appends every step it trains to a file. What counts is what the checkpoints kept: each
attempt's steps up to the step the next attempt restored. Joined step by step (ranks in order), every
epoch is then the uninterrupted order of the epoch's samples (the seedable sampler's order, which does
not depend on the number of processes), each sample once, then at most the last step's padding (repeated
samples of the epoch). Every process the test started is ended afterwards, on success and on failure.

The first scenario runs with torch's default store sharing, so the strategy's warning about it shows (a
job that could not grow); shrinking works without the setting. The others set
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, which growing needs. ``make test`` runs the killed worker (2 -> 2);
the agent that leaves and the one that joins, restarts onto other numbers of processes, are marked ``long``
(``tests/lightning/test_unit.py`` checks the warning's text).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.attempts import check_exactly_once
from tests.helpers.torchrun import Agent, free_port, listening_pid
from tests.scripts.elastic import HOLD_WORLD

pytestmark = pytest.mark.lightning

BOUND = 300.0
"""Seconds the test waits for the workers to hold, then for the agents to finish. A scenario takes about a
minute on a busy 2-core machine (two rendezvous of 3 s each, two Lightning start-ups); the bound only ends
a hang (a rendezvous that never closes), killing every process the test started."""
SHARING = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
WARNING = "whose agents share the rendezvous store with the workers"


class Job:
    """The agents of one elastic run, all ending with the test."""

    def __init__(self, out: Path) -> None:
        self.out, self.port, self.run_id = out, free_port(), uuid.uuid4().hex
        self.env = {SHARING: "1"}
        self.agents: list[Agent] = []

    def start(self) -> Agent:
        launcher = [
            "--nnodes=1:3", "--nproc-per-node=1", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{self.port}", f"--rdzv-id={self.run_id}", "--max-restarts=3",
            # NOTE: how long a round waits for more nodes once it has its minimum (default 30 s).
            "--rdzv-conf=last_call_timeout=3",
        ]  # fmt: skip
        command = ["-m", "tests.scripts.elastic", str(self.out)]
        log = self.out / f"agent-{len(self.agents)}.log"
        self.agents.append(Agent(launcher, command, log, self.env))
        return self.agents[-1]

    def wait_for(self, done: Callable[[], bool], what: str) -> None:
        """Poll ``done`` until it holds; fail (the fixture then ends every process) after ``BOUND``."""
        deadline = time.monotonic() + BOUND
        while not done():
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} after {BOUND}s:\n{self.logs()}")
            time.sleep(0.1)  # NOTE: polling a condition, not waiting for time to pass

    def held(self) -> bool:
        return all((self.out / f"held-{rank}").exists() for rank in range(HOLD_WORLD))

    def non_host(self) -> Agent:
        """An agent that does not host the rendezvous' store (killing that one would end the job)."""
        host = listening_pid(self.port, [agent.pid for agent in self.agents])
        return next(agent for agent in self.agents if agent.pid != host)

    def finish(self) -> list[int]:
        """Every living agent's exit status, once all have exited."""
        living = [agent for agent in self.agents if agent.process.returncode is None]
        self.wait_for(lambda: all(agent.process.poll() is not None for agent in living), "end of the fit")
        return [agent.process.returncode for agent in living]

    def logs(self) -> str:
        return "\n".join(f"== {agent.log.name}:\n{agent.text()[-4000:]}" for agent in self.agents)

    def end(self) -> None:
        for agent in self.agents:
            agent.kill()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    run = Job(tmp_path)
    try:
        yield run
    finally:
        run.end()


@pytest.mark.long
def test_an_agent_that_leaves_resumes_on_fewer_processes(job: Job) -> None:
    """2 -> 1, with torch's default store sharing: the strategy warns (the job could not grow), and
    shrinking works without the setting."""
    job.env = {}
    job.start(), job.start()
    job.wait_for(job.held, "worker holding")
    job.non_host().kill()
    (job.out / "go").write_text("")  # NOTE: the survivor steps on, into its gone peer, and restarts
    assert job.finish() == [0], job.logs()
    check_exactly_once(job.out, final_world=1)
    assert WARNING in job.logs() and f"{SHARING}=1 torchrun --nnodes=1:3" in job.logs()


@pytest.mark.long
def test_an_agent_that_joins_resumes_on_more_processes(job: Job) -> None:
    job.start(), job.start()
    job.wait_for(job.held, "worker holding")
    job.start()  # NOTE: the agents see a node waiting and restart their workers (held: nothing trained since)
    assert job.finish() == [0, 0, 0], job.logs()
    check_exactly_once(job.out, final_world=3)
    assert WARNING not in job.logs()


def test_a_killed_worker_resumes_on_as_many_processes(job: Job) -> None:
    job.start(), job.start()
    job.wait_for(job.held, "worker holding")
    os.kill(int((job.out / "held-1").read_text()), signal.SIGKILL)  # NOTE: its agent restarts the group
    assert job.finish() == [0, 0], job.logs()
    check_exactly_once(job.out, final_world=2)
