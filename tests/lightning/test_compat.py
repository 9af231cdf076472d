"""The supported Lightning releases: older ones are refused when a strategy is built, and the declared
bounds (``pyproject.toml``), the releases ``make test-oldest`` installs, the check and the development page agree
(docs/DESIGN.md, "Supported versions")."""

from __future__ import annotations

import re
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest

from lightning_shard.lightning import ShardStrategy
from lightning_shard.lightning._private import _accelerator_connector
from lightning_shard.lightning.compat import (
    OLDEST_LIGHTNING,
    check_lightning_version,
    install_fix,
    supported_range,
)
from tests.helpers.runner import ROOT


@pytest.mark.parametrize("version", ["2.4.0", "2.2.5", "2.0.9.post0", "1.9.5"])
def test_an_older_lightning_is_refused_with_the_range_and_the_fix(version: str) -> None:
    with pytest.raises(RuntimeError) as refused:
        check_lightning_version(version)
    message = str(refused.value)
    assert f"Lightning {version} is installed" in message
    assert "supports Lightning 2.5 to 2.6" in message
    assert '`pip install "lightning>=2.5,<2.7"`' in message
    assert "one batch behind" in message, "the message says what would go wrong"


@pytest.mark.parametrize("version", ["2.5.0", "2.5.0.post0", "2.5.1rc1", "2.6.6", "2.7.0", "3.0.0", "dev"])
def test_supported_and_newer_releases_pass(version: str) -> None:
    check_lightning_version(version)


def test_the_installed_release_builds_a_strategy() -> None:
    check_lightning_version(pl.__version__)
    assert isinstance(ShardStrategy(), ShardStrategy)


def test_an_unknown_lightning_layout_names_the_supported_range() -> None:
    with pytest.raises(RuntimeError) as refused:
        _accelerator_connector(SimpleNamespace())
    assert supported_range() in str(refused.value) and install_fix() in str(refused.value)


def _declared() -> dict[str, str]:
    """Each dependency's requirement as ``pyproject.toml`` declares it (``lightning>=2.5,<2.7``)."""
    text = (ROOT / "pyproject.toml").read_text()
    found = dict(re.findall(r'"((torch|lightning|torchdata)>=[\d.]+(?:,<[\d.]+)?)"', text))
    assert set(found.values()) == {"torch", "lightning", "torchdata"}, found
    return {name: requirement for requirement, name in found.items()}


def _lower_bounds() -> dict[str, str]:
    return {name: requirement.split(">=")[1].split(",")[0] for name, requirement in _declared().items()}


def test_declared_lightning_range_is_the_tested_one() -> None:
    assert f'pip install "{_declared()["lightning"]}"' == install_fix()


def _oldest_pins() -> dict[str, str]:
    text = (ROOT / "tests" / "oldest-constraints.txt").read_text()
    return dict(re.findall(r"^([\w-]+)==([\w.]+)$", text, flags=re.MULTILINE))


def test_declared_lower_bounds_are_the_releases_test_oldest_runs() -> None:
    bounds, pins = _lower_bounds(), _oldest_pins()
    assert bounds["lightning"] == ".".join(map(str, OLDEST_LIGHTNING))
    assert pins["lightning"] == pins["pytorch-lightning"] == f"{bounds['lightning']}.0"
    assert pins["torchdata"] == f"{bounds['torchdata']}.0"
    assert pins["torch"] == "2.13.0", "the cached CPU build: any other pulls a multi-GB CUDA build"


def test_the_development_page_states_the_tested_matrix() -> None:
    """docs/development.md, "Supported versions" (the install page includes its table)."""
    page = (ROOT / "docs" / "development.md").read_text()
    section = page.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    assert '--8<-- "docs/development.md:versions"' in (ROOT / "docs" / "install.md").read_text()
    for name, requirement in _declared().items():
        assert f"`{requirement}`" in section, name
    pins = _oldest_pins()
    for label, name in (("Lightning", "lightning"), ("torchdata", "torchdata")):
        assert f"{label} {pins[name]}" in section, name
    assert "make test-oldest" in section and "2.13.0" in section
