"""Each example page says which packages its examples need beyond ``lightning_shard`` (which brings
torch, Lightning and torchdata): a page that imports a package its ``**Packages**:`` line does not name
fails here, as it would for a reader who installed only the wheel."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import BROUGHT, DOCS, OPT_IN, ROOT, blocks, declared, extras, files, page_id, pages
from tests.docs.environments import makefile_words

EXAMPLE_PAGES = [DOCS / "quickstart.md", *sorted((DOCS / "guides").glob("*.md"))]


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
    assert imported(DOCS / "guides" / "streaming.md") - BROUGHT == {
        "datasets",
        "litdata",
        "webdataset",
        "streaming",
    }


def test_the_examples_environment_holds_the_declared_packages_less_the_opt_in_ones() -> None:
    """What ``tests/docs/test_docs_examples.py`` installs beside the wheel for each page."""
    assert extras(DOCS / "guides" / "streaming.md") == {"datasets", "litdata", "webdataset"}
    assert extras(DOCS / "guides" / "evaluation.md") == {"torchmetrics"}
    assert extras(DOCS / "quickstart.md") == extras(DOCS / "guides" / "multi-machine.md") == set()
    assert extras(DOCS.parent / "README.md") == set()


def test_only_blocks_that_are_not_run_import_an_opt_in_package() -> None:
    """An opt-in package (Ray) is not in a page's environment: a block that runs cannot import it."""
    for page in pages():
        for block in (block for block in blocks(page) if block.runs):
            modules = set(re.findall(r"^\s*(?:from|import) (\w+)", block.code, re.M))
            assert not modules & OPT_IN, f"{page_id(page)}:{block.line} imports {sorted(modules & OPT_IN)}"


def test_the_streaming_page_installs_litdata_as_the_makefile_does() -> None:
    """Without its dependencies, then those less ``torchvision``: a plain ``pip install litdata`` replaces
    the reader's torch (the newest ``torchvision`` requires another release)."""
    text = (DOCS / "guides" / "streaming.md").read_text()
    commands = [line for line in text.splitlines() if line.startswith("pip install")]
    assert f"pip install --no-deps {shlex.join(makefile_words('LITDATA'))}" in commands
    assert f"pip install {' '.join(_makefile_line('LITDATA_DEPS'))}" in commands
    assert not [line for line in commands if "litdata" in line and "--no-deps" not in line]


def _makefile_line(name: str) -> list[str]:
    """The Makefile's ``NAME := ...`` as written (quotes kept, as a reader copies them)."""
    line = re.search(rf"^{name} := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert line is not None
    return line[1].split()
