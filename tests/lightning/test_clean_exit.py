"""Every process of a fit under the strategies exits when the fit ends, and leaves nothing behind (docs/DESIGN.md,
"No hangs"): Fabric and ``Trainer`` fits on 2 and 3 processes, map-style and stream data read by 2
``DataLoader`` workers, stopped mid-epoch with a save and resumed from it in a new launch
(``tests/scripts/clean_exit.py``), launched again and again, the race at the end forced in half of them
(``tests/helpers/idle_gloo.py``). A launch fails if it hangs, exits with an error, leaves any process alive
once its command has exited and its output has closed (a rank, a ``DataLoader`` worker, anything it started
in another session), or if a rank did not write what it trained.
"""

from __future__ import annotations

import json
import os
from itertools import product
from pathlib import Path

import pytest

from tests.helpers.idle_gloo import ENV
from tests.helpers.runner import run_to_end, script

pytestmark = pytest.mark.lightning

BOUND = 240.0
"""Seconds a launch may print nothing before it counts as hung and everything it started is killed (its
process group, and whatever carries its mark in another session: ``tests/helpers/runner.py``). Generous: a
launch takes about 10 s on 2 idle cores, its longest silence (3 processes importing torch and Lightning)
about 5 s; 240 s leaves room for a load average of 20 and more, and a hang never ends."""
CELLS = list(product(("fabric", "trainer"), ("map", "stream"), (2, 3)))
"""``(loop, data, processes)``: each a stop launch, then a resume launch from its save."""
LAUNCHES = int(os.environ.get("CLEAN_EXIT_LAUNCHES", "24"))
"""Launches of the long test, in rounds of 16: every cell stopped and resumed, the race forced; then the cells
in reverse order (the streams first) as they come; ... 24 by default (``CLEAN_EXIT_LAUNCHES`` sets it)."""


def _launch(out: Path, loop: str, data: str, processes: int, phase: str, forced: bool) -> None:
    """One launch of ``tests/scripts/clean_exit.py``, checked."""
    env = {**os.environ, ENV: "1" if forced else "0"}
    command = script("clean_exit", loop, data, str(processes), phase, str(out))
    ended = run_to_end(command, BOUND, base_env=env)
    what = f"{loop} {data} on {processes} ({phase}, {'forced' if forced else 'as it comes'})"
    assert ended.returncode == 0, f"{what} exited {ended.returncode}:\n{ended.output[-4000:]}"
    assert ended.left == [], f"{what} left processes alive: {ended.left}"
    records = [json.loads((out / f"{phase}_rank{rank}.json").read_text()) for rank in range(processes)]
    assert all(records), f"{what}: a rank trained no step: {records}"


def test_a_fabric_fit_stopped_and_resumed_leaves_nothing_alive(tmp_path: Path) -> None:
    """The cell that hung plain DDP's way before the fix (5 hangs and 1 rank left alive in 6 forced stop
    launches): the script destroys the group right after a backward, while its model is alive."""
    for phase in ("stop", "resume"):
        _launch(tmp_path, "fabric", "map", 2, phase, forced=True)


@pytest.mark.long
def test_fits_stopped_and_resumed_again_and_again_leave_nothing_alive(tmp_path: Path) -> None:
    for launch in range(LAUNCHES):
        pair, stage = divmod(launch, 2)
        round_, cell = divmod(pair, len(CELLS))
        forced = round_ % 2 == 0
        loop, data, processes = (CELLS if forced else CELLS[::-1])[cell]
        phase = ("stop", "resume")[stage]
        _launch(tmp_path / str(pair), loop, data, processes, phase, forced)
        print(f"launch {launch + 1} of {LAUNCHES}: {loop} {data} on {processes} ({phase}) ended clean")
