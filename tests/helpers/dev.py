"""The ``dev`` extra (``pyproject.toml``: ruff, mypy, MkDocs, build, twine, readme_renderer,
trove-classifiers): ``make test`` installs it; a contributor's ``pip install -e ".[test]"`` does not, and then
each test that needs one of its tools skips, naming the tool and the extra, while ``pytest`` runs the rest."""

from __future__ import annotations

from types import ModuleType

import pytest


def needs_dev(module: str) -> ModuleType:
    """``module`` (a tool of the ``dev`` extra), imported; without it the calling test or fixture skips."""
    reason = f'needs `{module}`, from the `dev` extra: pip install -e ".[test,dev]" (`make test` does)'
    return pytest.importorskip(module, reason=reason)
