"""MkDocs hooks: render the options table of docs/options.md from ``ShardOptions`` / ``StrategyOptions``,
and draw the figure of docs/batches.md with docs/batches_figure.py.

The dataclasses are the one home of every option (docs/DESIGN.md, "Options"); the page holds only the
marker, so the site cannot drift from the code. ``tests/core/test_options.py`` checks the marker. The
figure is drawn from what ``prepare_data_loader`` deals out at each build (no network, no file written into
docs/); ``tests/docs/test_batches_figure.py`` checks it.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

from lightning_shard.options import option_table

MARKER = "<!-- option-table -->"
FIGURE_SCRIPT = Path(__file__).with_name("batches_figure.py")
FIGURE = "images/batches.svg"
"""Where docs/batches.md finds the figure in the built site."""


def render(markdown: str) -> str:
    """``markdown`` with the marker replaced by the table; a page that should hold it and does not fails."""
    return markdown.replace(MARKER, option_table())


def batches_figure() -> str:
    """The figure of docs/batches.md, as SVG text: docs/batches_figure.py run as a script's module."""
    return str(runpy.run_path(str(FIGURE_SCRIPT))["draw"]())


def on_files(files: Any, config: Any, **kwargs: Any) -> Any:
    files.append(File.generated(config, FIGURE, content=batches_figure()))
    return files


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri == "options.md" and MARKER not in markdown:
        raise ValueError(f"docs/options.md lost its `{MARKER}` marker: the options table would be missing.")
    return render(markdown)
