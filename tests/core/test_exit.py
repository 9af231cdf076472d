"""The default process group is destroyed at exit (``comm.collectives.destroy_group_at_exit``): a gloo group
left to the interpreter's teardown aborted now and then (exit 134) when rank 0 left first."""

from __future__ import annotations

import sys

from tests.helpers.runner import ROOT, run_command

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
