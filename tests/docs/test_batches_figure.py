"""The figure of docs/batches.md ("How batches are dealt out"): docs/batches_figure.py draws it from what
``prepare_data_loader`` deals out, at each build of the site (docs/hooks.py); its dispatch panel follows the
dispatcher's rule, which a real 2-process dispatch run must match here."""

from __future__ import annotations

import importlib.util
import runpy
from typing import Any

import pytest
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from tests.docs.blocks import DOCS
from tests.helpers.dev import needs_dev
from tests.helpers.dist import run_distributed

FIGURE = runpy.run_path(str(DOCS / "batches_figure.py"))
"""The script's functions (run as a script, not imported: docs/ is no package)."""


def _dispatched(rank: int, world_size: int) -> list[list[int]]:
    loader = DataLoader(range(FIGURE["SAMPLES"]), batch_size=4)
    dispatcher = prepare_data_loader(loader, dispatch_batches=True, put_on_device=True)
    return [batch.tolist() for batch in dispatcher]


@pytest.mark.dist
def test_the_dispatch_panel_is_what_a_dispatcher_sends() -> None:
    assert run_distributed(_dispatched, 2) == FIGURE["dispatch_deal"](4, 2)


def test_the_panels_show_each_option_and_mark_the_padding() -> None:
    panels = dict(FIGURE["panels"]())
    assert len(panels) == 6
    shard = next(dealt for title, dealt in panels.items() if title.startswith("shard"))
    assert shard == [[[0, 1, 2, 3], [8, 9, 10, 0]], [[4, 5, 6, 7], [1, 2, 3, 4]]]
    # 11 samples in 2 steps of 8: the 5 read a second time are the padding, in reading order
    assert FIGURE["repeats"](shard) == {(1, 0, 3), (1, 1, 0), (1, 1, 1), (1, 1, 2), (1, 1, 3)}
    balanced = next(dealt for title, dealt in panels.items() if title.startswith('even_batches="balanced"'))
    assert FIGURE["repeats"](balanced) == set()
    resumed = [dealt for title, dealt in panels.items() if "resumed" in title or "saved" in title]
    read = sorted(i for dealt in resumed for steps in dealt for batch in steps for i in batch)
    assert sorted(set(read)) == list(range(11)), "the resume reads every sample"


def test_the_build_draws_the_figure_the_page_shows(tmp_path: Any) -> None:
    needs_dev("mkdocs")  # NOTE: `docs/hooks.py` is a MkDocs hook
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    svg = hooks.batches_figure()
    assert svg.startswith("<svg") and svg.count("<rect") > 50
    for title, _ in FIGURE["panels"]():
        assert title.replace('"', "&quot;").replace("'", "&#x27;") in svg
    assert f"]({hooks.FIGURE})" in (DOCS / "batches.md").read_text()
