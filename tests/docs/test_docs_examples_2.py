"""The documentation's pages run (the second half; ``tests/docs/page_runs.py`` says how)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import page_id
from tests.docs.environments import Environments
from tests.docs.page_runs import check_page, half


@pytest.mark.slow
@pytest.mark.parametrize("page", half(1), ids=page_id)
def test_page_runs(
    page: Path, tmp_path: Path, environments: Environments, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_page(page, tmp_path, environments, monkeypatch)
