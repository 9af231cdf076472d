"""Every Python block of the documentation runs (docs/**/*.md), so the pages cannot drift from the code,
and each page runs in a fresh environment holding only what its ``**Packages**:`` line declares: the
wheel, plus that page's extras (``tests/docs/environments.py``).

Untitled blocks of a page run in one namespace, titled blocks are files run as scripts whose output must
hold the page's ``output of`` blocks (``tests/docs/blocks.py`` says how); ``tests/docs/page_runner.py``
runs them all, with the environment's Python, in the page's own empty directory outside the repository,
on CPU. The README runs as a page.

NOTE: the pages are split between two test files (``half``), so that pytest-xdist's two workers, a file
each at a time, share them; the environments are built once for both.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.docs.blocks import Block, blocks, extras, files, missing_output, outputs, page_id, pages, steps
from tests.docs.environments import Environments
from tests.helpers.runner import run_command

RUNNER = Path(__file__).with_name("page_runner.py")
PAGE_TIMEOUT = 300.0
"""Generous: a 2-process fit of a few steps takes seconds and prints as it goes; this bound (no output for
so long) only proves "no hang" on a loaded machine."""
DECLARABLE = sorted({package for page in pages() for package in extras(page)})
"""Every package some page adds to the wheel's environment."""


IN_MAKE_TEST = {"README.md", "index.md", "quickstart.md"}
"""The pages ``make test`` runs: the README and the pages a newcomer reads first. The other pages are marked
``long`` (``make test-long``), the evaluation guide among them (a minute and a half, its torchmetrics
environment included; ``tests/lightning/test_evaluation.py`` runs the same comparisons in ``make test``)."""


def half(which: int) -> list[Path]:
    """Every other page (``which``: 0 or 1), in the order of ``pages()``."""
    return pages()[which::2]


def page_params(which: int) -> list[Any]:
    """``half(which)`` as pytest parameters, the pages outside ``IN_MAKE_TEST`` marked ``long``."""
    return [
        pytest.param(page, id=page_id(page), marks=() if page_id(page) in IN_MAKE_TEST else pytest.mark.long)
        for page in half(which)
    ]


def check_page(page: Path, where: Path, environments: Environments, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``page`` in ``where`` in its environment; check what it printed against its output blocks."""
    monkeypatch.delenv("PYTHONPATH", raising=False)  # NOTE: nothing of the checkout may leak in
    environment = environments.for_extras(extras(page))
    # NOTE: of the packages pages declare, it holds this page's and those the wheel brings (torchmetrics,
    # which Lightning requires), none of another page's.
    holds, brought = environment.holds(DECLARABLE), environments.base.holds(DECLARABLE)
    assert holds == extras(page) | brought, f"{page_id(page)} runs among {sorted(holds)}"

    page_blocks = blocks(page)
    expected = outputs(page)
    shown = {block.title for block in expected} - {None}
    assert shown <= set(steps(page_blocks)), f"{page.name}: output shown of a file that does not run: {shown}"
    for name, code in files(page_blocks).items():
        (where / name).write_text(code)
    spec = {
        "page": str(page),
        "name": f"docs_{page.stem}",
        "steps": [
            {"code": step.code, "line": step.line} if isinstance(step, Block) else {"file": step}
            for step in steps(page_blocks)
        ],
    }
    (where / "steps.json").write_text(json.dumps(spec))
    shutil.copyfile(RUNNER, where / RUNNER.name)
    run_command([environment.python, RUNNER.name, "steps.json", "outputs.json"], PAGE_TIMEOUT, cwd=where)
    printed = json.loads((where / "outputs.json").read_text())
    for title in shown:
        _check_output(page, expected, title, printed[title])
    _check_output(page, expected, None, printed[""])


def _check_output(page: Path, expected: list[Block], title: str | None, output: str) -> None:
    """The page's output blocks of ``title`` (``None``: its untitled blocks) against what it printed."""
    for block in (block for block in expected if block.title == title):
        missing = missing_output(block, output)
        assert not missing, (
            f"{page.name}:{block.line}: {title or 'the page'} no longer prints {missing}:\n{output[-3000:]}"
        )
