"""The default process group is held and destroyed at exit (``comm.collectives.destroy_group_at_exit``,
docs/DESIGN.md, "No hangs"): a gloo group left to the interpreter's teardown aborted now and then (exit
134) when rank 0 left first, and a group whose last reference DDP's reducer drops can hang the process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.helpers.idle_gloo import ENV
from tests.helpers.runner import ROOT, finish, run_command

SCRIPT = """
import atexit, torch.distributed as dist
from lightning_shard.comm.collectives import destroy_group_at_exit
dist.init_process_group("gloo", rank=0, world_size=1, init_method="tcp://127.0.0.1:0")
# NOTE: atexit runs the last registered first, so this one runs after ours.
atexit.register(lambda: print("initialised at exit:", dist.is_initialized()))
destroy_group_at_exit()
destroy_group_at_exit()  # NOTE: registered once
"""


def test_the_default_group_is_destroyed_at_exit() -> None:
    output = run_command([sys.executable, "-c", SCRIPT], timeout=120, cwd=ROOT)
    assert "initialised at exit: False" in output


RACE = """
import sys, torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from lightning_shard.comm.collectives import destroy_group_at_exit
from tests.helpers.idle_gloo import idle_gloo_if_asked

dist.init_process_group("gloo", rank=0, world_size=1, init_method="file://" + sys.argv[1])
destroy_group_at_exit()  # NOTE: as the strategies do in `setup_environment`
model = DistributedDataParallel(nn.Linear(4, 1))
model(torch.ones(2, 4)).sum().backward()
dist.destroy_process_group()
idle_gloo_if_asked()
# NOTE: a destroyed gloo group still runs (its `shutdown` does nothing): the freshest all-reduce is this one.
model(torch.ones(2, 4)).sum().backward()
del model  # NOTE: DDP's reducer drops its reference to the group here, holding the GIL
print("model freed", flush=True)
"""


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="forcing the race needs Linux's scheduler calls"
)
def test_a_group_the_script_destroyed_under_a_live_model_ends_cleanly(tmp_path: Path) -> None:
    """The order that hangs plain DDP: the script destroys the group, then frees the model. Forced
    (``tests/helpers/idle_gloo.py``), it hung 6 runs of 6 before the strategies held the group; held, the
    last reference is ours, dropped at exit without the GIL. It also fails if torch's ``ProcessGroup``
    stops releasing the GIL in its destructor (the process then hangs at exit)."""
    command = [sys.executable, "-c", RACE, str(tmp_path / "rendezvous")]
    # NOTE: a bound on silence; the script takes seconds, a hang never ends (`tests/helpers/runner.py`).
    returncode, output = finish(command, timeout=120, base_env={**os.environ, ENV: "1"})
    assert returncode == 0 and "model freed" in output, output[-3000:]
