"""The multi-machine guide's Ray Train script (docs/guides/multi-machine.md, "Ray Train"), opt-in as
``tests/ray/test_ray.py``: ``ray_train.py`` as the page has it, launched on 2 workers and stopped after 3
steps, then relaunched on 3 workers (``tests/scripts/ray_guide.py``), which must find the run's checkpoint
by its ``name`` and finish the 2 epochs from there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docs.blocks import DOCS, blocks, files
from tests.helpers.runner import run_command, script

pytestmark = [
    pytest.mark.lightning,
    pytest.mark.skipif(os.environ.get("LIGHTNING_SHARD_TEST_RAY") != "1", reason="opt-in: `make test-ray`"),
]

PAGE = DOCS / "guides" / "multi-machine.md"
BOUND = 300.0
"""As in ``tests/ray/test_ray.py``: seconds without output that count as a hang."""


def test_the_guides_ray_script_relaunches_on_another_worker_count(tmp_path: Path) -> None:
    pytest.importorskip("ray.train.lightning")
    page = blocks(PAGE)
    (tmp_path / "train.py").write_text(files(page)["train.py"])
    (ray_script,) = [block.code for block in page if block.title == "ray_train.py"]
    (tmp_path / "ray_train.py").write_text(ray_script)
    first = run_command(script("ray_guide", str(tmp_path), "2", "--max-steps", "3"), timeout=BOUND)
    again = run_command(script("ray_guide", str(tmp_path), "3"), timeout=BOUND)
    # 64 samples in batches of 8: the rest of epoch 0 (16) in 1 step of 3 x 8, then epoch 1 in 3 steps.
    stopped, relaunched = (
        "2 workers, started afresh: step 3",
        "3 workers, started from its checkpoint: step 7",
    )
    assert stopped in first and relaunched in again
    assert stopped in PAGE.read_text() and relaunched in PAGE.read_text(), "the page shows what it prints"
