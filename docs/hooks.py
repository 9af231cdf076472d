"""MkDocs hook: renders the options table of docs/options.md from ``ShardOptions`` / ``StrategyOptions``.

The dataclasses are the one home of every option (docs/DESIGN.md, "Options"); the page holds only the
marker, so the site cannot drift from the code. ``tests/core/test_options.py`` checks the marker.
"""

from __future__ import annotations

from typing import Any

from lightning_shard.options import option_table

MARKER = "<!-- option-table -->"


def render(markdown: str) -> str:
    """``markdown`` with the marker replaced by the table; a page that should hold it and does not fails."""
    return markdown.replace(MARKER, option_table())


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri == "options.md" and MARKER not in markdown:
        raise ValueError(f"docs/options.md lost its `{MARKER}` marker: the options table would be missing.")
    return render(markdown)
