"""Each example page says which packages its examples need beyond ``lightning_shard`` (which brings
torch, Lightning and torchdata): a page that imports a package its ``**Packages**:`` line does not name
fails here, as it would for a reader who installed only the wheel."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import DOCS, blocks, files, page_id, pages

BROUGHT = {"lightning_shard", "torch", "lightning", "torchdata", "typing_extensions"}
"""What ``pip install lightning_shard`` installs (and their own dependencies the pages use)."""
EXAMPLE_PAGES = [DOCS / "quickstart.md", *sorted((DOCS / "guides").glob("*.md"))]
_PACKAGES = re.compile(r"^\*\*Packages\*\*: (.+)$", re.M)


def declared(text: str) -> set[str] | None:
    """The packages the page's ``**Packages**:`` line names (``None``: it has none)."""
    line = _PACKAGES.search(text)
    return set(re.findall(r"`([\w-]+)`", line[1])) if line else None


def imported(page: Path) -> set[str]:
    """The top-level modules the page's blocks import, less the standard library and the page's files."""
    page_blocks = blocks(page)
    own = {name.removesuffix(".py") for name in files(page_blocks)}
    modules = {m for block in page_blocks for m in re.findall(r"^\s*(?:from|import) (\w+)", block.code, re.M)}
    return {m for m in modules if m not in sys.stdlib_module_names and m not in own}


@pytest.mark.parametrize(
    "page", sorted(set(EXAMPLE_PAGES) | set(pages()) - {DOCS.parent / "README.md"}), ids=page_id
)
def test_a_page_names_the_packages_its_examples_import(page: Path) -> None:
    needed = imported(page) - BROUGHT
    named = declared(page.read_text())
    if page in EXAMPLE_PAGES or needed:
        assert named is not None, f"{page_id(page)} has no `**Packages**:` line (it imports {sorted(needed)})"
        assert needed <= named, f"{page_id(page)} imports {sorted(needed - named)} without naming them"


def test_an_undeclared_import_is_found() -> None:
    assert declared("text\n\n**Packages**: `lightning_shard`, and `datasets` for the examples.\n") == {
        "lightning_shard",
        "datasets",
    }
    assert imported(DOCS / "guides" / "streaming.md") - BROUGHT == {"datasets", "litdata"}
