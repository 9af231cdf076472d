"""Every Python block of the documentation runs (docs/**/*.md), so the pages cannot drift from the code.

Untitled blocks of a page run in one namespace in this process; titled blocks are files run as scripts
(``tests/docs/blocks.py`` says how). Each page runs in its own empty directory, on CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.docs.blocks import DOCS, NOT_RUN, Block, blocks, files, pages, steps
from tests.helpers.runner import run_command

SCRIPT_TIMEOUT = 300.0
"""Generous: a 2-process fit of a few steps takes seconds; this only proves "no hang" on a loaded machine."""


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(DOCS)))
def test_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page_blocks = blocks(page)
    for name, code in files(page_blocks).items():
        (tmp_path / name).write_text(code)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for step in steps(page_blocks):
        if isinstance(step, Block):
            # NOTE: padded with blank lines so that a traceback names the page's own line.
            code = "\n" * step.line + step.code
            exec(compile(code, str(page), "exec"), namespace)  # noqa: S102 - the page's own example
        else:
            run_command([sys.executable, step], SCRIPT_TIMEOUT, cwd=tmp_path)


def test_few_blocks_are_skipped() -> None:
    skipped = [(page.name, block.line) for page in pages() for block in blocks(page) if not block.runs]
    assert len(skipped) <= 3, f"blocks marked `{NOT_RUN}`: {skipped}; make them run instead"


def test_the_parser_sees_every_python_fence() -> None:
    for page in sorted(DOCS.rglob("*.md")):
        fences = sum(line.lstrip().startswith("```python") for line in page.read_text().splitlines())
        assert fences == len(blocks(page)), f"{page.name}: a ```python fence the parser does not read"
