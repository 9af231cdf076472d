"""The documentation's pages run (the first half; ``tests/docs/page_runs.py`` says how), and the parser
they run by reads every block (``tests/docs/test_pages.py``: which blocks may be skipped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import DOCS, README, Block, blocks, missing_output, page_id, pages
from tests.docs.environments import Environments
from tests.docs.page_runs import IN_MAKE_TEST, check_page, half, page_params


@pytest.mark.slow
@pytest.mark.parametrize("page", page_params(0))
def test_page_runs(
    page: Path, tmp_path: Path, environments: Environments, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_page(page, tmp_path, environments, monkeypatch)


def test_the_pages_are_halved_between_two_files() -> None:
    assert sorted(half(0) + half(1)) == sorted(pages())
    assert IN_MAKE_TEST <= {page_id(page) for page in pages()}, "a page `make test` runs was renamed"


def test_the_parser_sees_every_python_fence() -> None:
    for page in [*sorted(DOCS.rglob("*.md")), README]:
        fences = sum(line.lstrip().startswith("```python") for line in page.read_text().splitlines())
        assert fences == len(blocks(page)), f"{page.name}: a ```python fence the parser does not read"


def test_an_output_block_that_the_run_does_not_print_is_found() -> None:
    shown = Block("{'mean_id': 47.22}\n103 ids gathered\n", "evaluate.py", 1)
    printed = "INFO: something\n{'mean_id': 50.5096}\nrank 0: 103 ids gathered\n"
    assert missing_output(shown, printed) == ["{'mean_id': 47.22}"]
