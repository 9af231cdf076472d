"""Every figure the evaluation pages state comes from a run the docs tests check: each decimal number of
their prose appears in an ``output of`` block, which ``test_docs_examples.py`` compares with what the
page's script prints. A figure typed by hand (as 47.22 once was for Lightning's DDP) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.blocks import DOCS, outputs, pages

FIGURE_PAGES = [DOCS / "guides" / "evaluation.md", DOCS / "differences.md"]
"""The pages whose figures are results of the code they describe (timings, in the benchmarks, are not)."""
_FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])(?!\s*(?:us|ms|s|MB|KB|x)\b)")
_FENCED = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)


def figures(text: str) -> set[str]:
    """The decimal figures of ``text`` outside code blocks (versions and measured times excluded)."""
    return set(_FIGURE.findall(_FENCED.sub("", text)))


def checked_output() -> str:
    return "\n".join(block.code for page in pages() for block in outputs(page))


@pytest.mark.parametrize("page", FIGURE_PAGES, ids=lambda page: page.name)
def test_every_figure_is_a_checked_output(page: Path) -> None:
    stated = figures(page.read_text())
    assert stated, f"{page.name} states no figure: is the pattern still right?"
    shown = checked_output()
    unbacked = sorted(
        figure for figure in stated if not re.search(rf"(?<![\w.]){re.escape(figure)}(?![\w.])", shown)
    )
    assert not unbacked, f"{page.name} states {unbacked}, which no checked `output of` block shows"


def test_the_figure_pattern() -> None:
    text = "gives 47.22 on 2 processes, 51.0 alone; Lightning 2.6.6; about 0.5 us a batch\n```\n9.75\n```\n"
    assert figures(text) == {"47.22", "51.0"}
