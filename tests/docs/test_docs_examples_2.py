"""The documentation's pages run (the second half; ``tests/docs/page_runs.py`` says how)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.environments import Environments
from tests.docs.page_runs import check_page, page_params


@pytest.mark.slow
@pytest.mark.parametrize("page", page_params(1))
def test_page_runs(
    page: Path, tmp_path: Path, environments: Environments, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_page(page, tmp_path, environments, monkeypatch)
