"""The fresh environments the documentation's examples run in (``tests/docs/environments.py``)."""

from __future__ import annotations

import os

import pytest

from tests.docs.environments import Environments
from tests.helpers.dev import needs_dev


@pytest.fixture(scope="session")
def environments(tmp_path_factory: pytest.TempPathFactory) -> Environments:
    """The page environments, shared by the pytest-xdist workers of this run (built once)."""
    needs_dev("build")  # NOTE: the wheel the environments install is built with `python -m build`
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # NOTE: each worker's base is a directory of the run's own
    root = shared / "docs-environments"
    root.mkdir(exist_ok=True)
    return Environments(root)
