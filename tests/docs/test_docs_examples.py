"""Every Python block of the documentation runs (docs/**/*.md), so the pages cannot drift from the code.

Untitled blocks of a page run in one namespace in this process; titled blocks are files run as scripts
whose output must hold the page's ``output of`` blocks (``tests/docs/blocks.py`` says how). Each page runs
in its own empty directory, on CPU. The README runs as a page.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import (
    DOCS,
    NOT_RUN,
    README,
    Block,
    blocks,
    files,
    missing_output,
    outputs,
    page_id,
    pages,
    steps,
)
from tests.helpers.runner import run_command

SCRIPT_TIMEOUT = 300.0
"""Generous: a 2-process fit of a few steps takes seconds; this only proves "no hang" on a loaded machine."""


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page_blocks = blocks(page)
    expected = outputs(page)
    shown = {block.title for block in expected} - {None}
    assert shown <= set(steps(page_blocks)), f"{page.name}: output shown of a file that does not run: {shown}"
    for name, code in files(page_blocks).items():
        (tmp_path / name).write_text(code)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    printed = io.StringIO()
    for step in steps(page_blocks):
        if isinstance(step, Block):
            # NOTE: padded with blank lines so that a traceback names the page's own line.
            code = "\n" * step.line + step.code
            with contextlib.redirect_stdout(printed):
                exec(compile(code, str(page), "exec"), namespace)  # noqa: S102 - the page's own example
        else:
            _check_output(
                page, expected, step, run_command([sys.executable, step], SCRIPT_TIMEOUT, cwd=tmp_path)
            )
    _check_output(page, expected, None, printed.getvalue())


def _check_output(page: Path, expected: list[Block], title: str | None, output: str) -> None:
    """The page's output blocks of ``title`` (``None``: its untitled blocks) against what it printed."""
    for block in (block for block in expected if block.title == title):
        missing = missing_output(block, output)
        assert not missing, (
            f"{page.name}:{block.line}: {title or 'the page'} no longer prints {missing}:\n{output[-3000:]}"
        )


def test_few_blocks_are_skipped() -> None:
    skipped = [(page.name, block.line) for page in pages() for block in blocks(page) if not block.runs]
    assert len(skipped) <= 3, f"blocks marked `{NOT_RUN}`: {skipped}; make them run instead"


def test_the_parser_sees_every_python_fence() -> None:
    for page in [*sorted(DOCS.rglob("*.md")), README]:
        fences = sum(line.lstrip().startswith("```python") for line in page.read_text().splitlines())
        assert fences == len(blocks(page)), f"{page.name}: a ```python fence the parser does not read"


def test_an_output_block_that_the_run_does_not_print_is_found() -> None:
    shown = Block("{'mean_id': 47.22}\n103 ids gathered\n", "evaluate.py", 1)
    printed = "INFO: something\n{'mean_id': 50.5096}\nrank 0: 103 ids gathered\n"
    assert missing_output(shown, printed) == ["{'mean_id': 47.22}"]
