"""The Python blocks of the documentation pages, as the docs tests run them.

A page's untitled ```` ```python ```` blocks run in order in one namespace, in the test's process. A block
with a title (```` ```python title="train.py" ````) is a file the reader saves and runs: blocks with the
same title are joined into that file, which runs as ``python train.py`` in its own process (Lightning
re-runs it for process 1) where its last block stands, unless another file of the page imports it (a
module such as ``model.py``). A block whose first line is ``# not run: <why>``
is skipped. A ```` ```text title="output of train.py" ```` block is what that file prints: each of its lines
must end a line of the file's output (a logger may prefix it), so a figure a page states fails the test
when the code no longer gives it; a ```` ```text title="output" ```` block is what the page's untitled
blocks print. The README runs as a page too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
_FENCE = re.compile(r'^(?P<indent>\s*)```python(?:\s+title="(?P<title>[^"]+)")?\s*$')
_OUTPUT = re.compile(r'^(?P<indent>\s*)```text\s+title="output(?: of (?P<title>[^"]+))?"\s*$')
NOT_RUN = "# not run:"
BROUGHT = frozenset({"lightning_shard", "torch", "lightning", "torchdata", "typing_extensions"})
"""What ``pip install lightning_shard`` installs (and their own dependencies the pages use)."""
OPT_IN = frozenset({"ray", "streaming"})
"""Packages a page names that ``make test`` does not install, so the blocks that need them are ``# not run``:
Ray is heavy (the multi-machine page's Ray Train section; ``make test-ray`` runs their script), and
mosaicml-streaming's package imports ``torchvision``, whose only build for torch 2.13 in the registry does not
load beside the CPU torch (the streaming page's section; the tests run the same code on the library's core)."""
_PACKAGES = re.compile(r"^\*\*Packages\*\*: (.+)$", re.M)


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
    return _fenced(page, _FENCE)


def outputs(page: Path) -> list[Block]:
    """The output blocks of ``page``: ``title`` names the file whose output each one shows (``None``: the
    page's untitled blocks)."""
    return _fenced(page, _OUTPUT)


def missing_output(expected: Block, output: str) -> list[str]:
    """The lines of ``expected`` that end no line of ``output``."""
    got = [line.rstrip() for line in output.splitlines()]
    wanted = [line.strip() for line in expected.code.splitlines() if line.strip()]
    return [line for line in wanted if not any(have.endswith(line) for have in got)]


def _fenced(page: Path, opening: re.Pattern[str]) -> list[Block]:
    found: list[Block] = []
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        fence = opening.match(lines[index])
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
    """Every documentation page with at least one Python block, and the README."""
    return [page for page in [*sorted(DOCS.rglob("*.md")), README] if blocks(page)]


def declared(text: str) -> set[str] | None:
    """The packages a page's ``**Packages**:`` line names (``None``: it has none)."""
    line = _PACKAGES.search(text)
    return set(re.findall(r"`([\w-]+)`", line[1])) if line else None


def extras(page: Path) -> frozenset[str]:
    """What ``page``'s examples run with beyond ``lightning_shard``: the packages its ``**Packages**:`` line
    names, less what ``lightning_shard`` brings and the opt-in ones (nothing, for a page without the line:
    its examples must run on the wheel alone)."""
    return frozenset((declared(page.read_text()) or set()) - BROUGHT - OPT_IN)


def page_id(page: Path) -> str:
    return str(page.relative_to(DOCS if page.is_relative_to(DOCS) else ROOT))


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
