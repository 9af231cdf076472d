"""Ray Train (docs/guides/multi-machine.md, "Ray Train"), opt-in: ``make test-ray`` installs the extra and
runs these. A real Ray cluster on this machine, 2 CPU workers under ``RayShardStrategy``, one killed
mid-epoch (``tests/scripts/ray_fit.py``): Ray restarts the group once from the checkpoint
``ShardReportCallback`` reported, and every epoch consists of the uninterrupted order of its samples, each
once, counted from what the checkpoints kept (``tests/helpers/attempts.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.attempts import check_exactly_once
from tests.helpers.runner import run_command, script
from tests.scripts.elastic import HOLD_WORLD

pytestmark = [
    pytest.mark.lightning,
    pytest.mark.skipif(os.environ.get("LIGHTNING_SHARD_TEST_RAY") != "1", reason="opt-in: `make test-ray`"),
]

BOUND = 300.0
"""Seconds without a line of output after which the run is killed with everything it started (Ray's own
processes included): Ray and two Lightning workers start in under a minute on a busy 2-core machine, and
Lightning and Ray print as the fit goes; only a hang stays silent this long."""


def test_a_worker_killed_mid_epoch_resumes_exactly_once(tmp_path: Path) -> None:
    pytest.importorskip("ray.train.lightning")
    output = run_command(script("ray_fit", str(tmp_path)), timeout=BOUND)
    assert "killing worker 1" in output and "ray fit done: None" in output
    # NOTE: Ray registers a reported checkpoint asynchronously: the kill may come before the hold's own
    # (step 3) is registered, and the group then restarts from an earlier one, which is as consistent.
    attempts = check_exactly_once(tmp_path, final_world=HOLD_WORLD, resumed_from=1)
    assert len(attempts) == 2, "one restart (max_failures=1)"
