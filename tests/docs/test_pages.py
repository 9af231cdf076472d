"""What the pages show is checked, and what they point to exists for a reader who installed the wheel.

Every fenced block names its language; every ``text`` block is an output that the docs tests compare with
what its page's code prints (``tests/docs/blocks.py``), so none is left unchecked. A user page names a file
of the repository only through an absolute link to it (a pip user has no checkout), and ``make`` targets
only on the contributor pages; the links lead to files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.blocks import DOCS, NOT_RUN, README, ROOT, blocks, files, outputs, page_id, pages

ALL_PAGES = [*sorted(DOCS.rglob("*.md")), README]
CONTRIBUTOR_PAGES = {"development.md", "DESIGN.md", "changelog.md"}
"""Pages for those who work on the package: they may name its files and ``make`` targets as they are."""
USER_PAGES = [page for page in ALL_PAGES if page_id(page) not in CONTRIBUTOR_PAGES]
LANGUAGES = {"python", "bash", "yaml", "text"}
NOT_OUTPUT = {("development.md", "layout")}
"""``text`` blocks that are not an output: the package's layout on the contributor page."""
REPOSITORY = "https://github.com/lightning-shard/lightning_shard"
_OPENING = re.compile(r'^\s*```(?P<language>\w*)(?:\s+title="(?P<title>[^"]*)")?\s*$')
_FENCED = re.compile(r"^\s*```.*?^\s*```[ \t]*$", re.S | re.M)
_REPOSITORY_FILE = re.compile(r"`((?:tests|examples|benchmarks|\.ci)/[^`]*|Makefile|make [a-z-]+)`")
_LINKED = re.compile(rf"\[[^\]]*\]\({re.escape(REPOSITORY)}/(?:blob|tree)/main/([^)#\s]+)\)")


def fences(page: Path) -> list[tuple[int, str, str | None]]:
    """Each fenced block's opening line number, language and title."""
    found, inside = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if not line.strip().startswith("```"):
            continue
        if inside:
            inside = line.strip() != "```"
            continue
        opening = _OPENING.match(line)
        found.append((number, opening["language"] if opening else line.strip(), opening and opening["title"]))
        inside = True
    return found


@pytest.mark.parametrize("page", ALL_PAGES, ids=page_id)
def test_every_block_names_its_language_and_every_text_block_is_a_checked_output(page: Path) -> None:
    for line, language, title in fences(page):
        assert language in LANGUAGES, (
            f"{page_id(page)}:{line}: a fence without a known language ({language!r})"
        )
        if language == "text" and (page_id(page), title) not in NOT_OUTPUT:
            assert title is not None and re.fullmatch(r"output( of .+)?", title), (
                f"{page_id(page)}:{line}: a `text` block that is no output the tests check; title it "
                '"output" (the page\'s untitled blocks print it) or "output of FILE"'
            )
    shown = outputs(page)
    if shown:
        assert page in pages(), f"{page_id(page)} shows output but runs no code"
        page_files = files(blocks(page))
        for block in shown:
            assert block.title is None or block.title in page_files, (
                f"{page_id(page)}:{block.line}: {block.title}"
            )


def test_a_text_block_that_is_no_output_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text('```python\nprint(1)\n```\n\n```\n1\n```\n\n```text title="output"\n1\n```\n')
    assert fences(page) == [(1, "python", None), (5, "", None), (9, "text", "output")]


def test_only_the_three_blocks_the_index_names_are_not_run() -> None:
    skipped = [
        (page_id(page), block.code.splitlines()[0])
        for page in pages()
        for block in blocks(page)
        if not block.runs
    ]
    assert [page for page, _ in skipped] == [
        "guides/multi-machine.md",
        "guides/streaming.md",
        "guides/streaming.md",
    ], skipped
    assert all(line.startswith(NOT_RUN) for _, line in skipped)
    index = (DOCS / "index.md").read_text()
    assert "Three blocks are marked `# not run`: a LitData fit on 2 processes,\na Ray Train fit" in index


def repository_references(markdown: str) -> list[str]:
    """The repository's files and ``make`` targets that ``markdown`` names outside a link to the repository
    and outside its code blocks."""
    prose = _LINKED.sub("", _FENCED.sub("", markdown))
    return _REPOSITORY_FILE.findall(prose)


@pytest.mark.parametrize("page", USER_PAGES, ids=page_id)
def test_a_user_page_links_the_repository_files_it_names(page: Path) -> None:
    text = page.read_text()
    if page == README:
        # NOTE: the README keeps the two set-up commands of a clone (CI's `.ci/run` calls `make test`).
        text = text.replace("`make demo`", "").replace("`make test`", "")
    assert repository_references(text) == [], (
        f"{page_id(page)}: link these to {REPOSITORY}, or move them to development.md"
    )


@pytest.mark.parametrize("page", ALL_PAGES, ids=page_id)
def test_the_repository_links_lead_to_files_that_exist(page: Path) -> None:
    missing = [path for path in _LINKED.findall(page.read_text()) if not (ROOT / path).exists()]
    assert not missing, f"{page_id(page)} links files the repository does not hold: {missing}"


def test_an_unlinked_repository_file_is_found() -> None:
    text = (
        f"Run `make demo`, read `examples/train.py` or [`tests/x.py`]({REPOSITORY}/blob/main/tests/x.py).\n"
        "```bash\nmake test\n```\n"
    )
    assert repository_references(text) == ["make demo", "examples/train.py"]
