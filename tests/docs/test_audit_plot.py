"""The audit guide's figure: ``examples/audit_plot.py`` runs and draws it, so the figure cannot rot."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.helpers.runner import ROOT, run_command

SCRIPT = ROOT / "examples" / "audit_plot.py"
FIGURE = ROOT / "docs" / "images" / "audit_reads.png"
PNG = b"\x89PNG\r\n\x1a\n"


def test_audit_plot_draws_the_guides_figure(tmp_path: Path) -> None:
    out = tmp_path / "reads.png"
    output = run_command([sys.executable, str(SCRIPT), str(out)], timeout=300)
    assert out.read_bytes().startswith(PNG) and out.stat().st_size > 10_000
    resumed, restarted = (line for line in output.splitlines() if "shard audit:" in line)
    assert resumed.endswith("8 duplicates (8 allowed as padding), 0 missing (0 allowed by drop_last): OK")
    assert "32 duplicates beyond the padding" in restarted


def test_the_guide_shows_the_committed_figure() -> None:
    assert FIGURE.read_bytes().startswith(PNG)
    assert "](../images/audit_reads.png)" in (ROOT / "docs" / "guides" / "audit.md").read_text()
