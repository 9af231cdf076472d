"""The Python blocks of the documentation pages, as the docs tests run them.

A page's untitled ```` ```python ```` blocks run in order in one namespace, in the test's process. A block
with a title (```` ```python title="train.py" ````) is a file the reader saves and runs: blocks with the
same title are joined into that file, which runs as ``python train.py`` in its own process (Lightning
re-runs it for process 1) where its last block stands, unless another file of the page imports it (a
module such as ``model.py``). A block whose first line is ``# not run: <why>``
is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).parents[2] / "docs"
_FENCE = re.compile(r'^(?P<indent>\s*)```python(?:\s+title="(?P<title>[^"]+)")?\s*$')
NOT_RUN = "# not run:"


@dataclass(frozen=True)
class Block:
    """One fenced Python block: its code, its file name (``None``: run in the page's namespace), its line."""

    code: str
    title: str | None
    line: int

    @property
    def runs(self) -> bool:
        return not self.code.lstrip().startswith(NOT_RUN)


def blocks(page: Path) -> list[Block]:
    """The Python blocks of ``page``, in order, dedented to their fence."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        index += 1
        if fence is None:
            continue
        start, indent, body = index, fence["indent"], []
        while lines[index].strip() != "```":
            body.append(lines[index][len(indent) :])
            index += 1
        found.append(Block("\n".join(body) + "\n", fence["title"], start))
        index += 1
    return found


def pages() -> list[Path]:
    """Every documentation page with at least one Python block."""
    return [page for page in sorted(DOCS.rglob("*.md")) if blocks(page)]


def files(page_blocks: list[Block]) -> dict[str, str]:
    """The files the titled blocks make, each the join of its blocks."""
    joined: dict[str, str] = {}
    for block in page_blocks:
        if block.title is not None and block.runs:
            joined[block.title] = joined.get(block.title, "") + block.code
    return joined


def steps(page_blocks: list[Block]) -> list[Block | str]:
    """What runs, in order: an untitled block, or the name of a file at its last block."""
    running = [block for block in page_blocks if block.runs]
    modules = _imported(files(page_blocks))
    last = {
        block.title: position
        for position, block in enumerate(running)
        if block.title is not None and block.title not in modules
    }
    ordered: list[Block | str] = []
    for position, block in enumerate(running):
        if block.title is None:
            ordered.append(block)
        elif last.get(block.title) == position:
            ordered.append(block.title)
    return ordered


def _imported(page_files: dict[str, str]) -> set[str]:
    """The files another file of the page imports (``from model import ...`` / ``import model``)."""
    return {
        name
        for name in page_files
        for other, code in page_files.items()
        if other != name and re.search(rf"^(from|import) {re.escape(name.removesuffix('.py'))}\b", code, re.M)
    }
