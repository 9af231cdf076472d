"""The wheel installs and works: built from this tree into the fresh virtual environment the documentation's
pages run in (``tests/docs/environments.py``: torch 2.13.0 CPU first, as the Makefile does, then the wheel
with its declared dependencies, then ``pip check``), where the package imports from the environment, not
the checkout; the quick starts (the README's and the site's) run there too, as pages
(``tests/docs/test_docs_examples.py``). A package file or dependency missing from the wheel fails, and so do
a long description the package index would not render (``twine check --strict``), missing project URLs
and a LICENSE missing from the sdist or the wheel, and metadata a user searches by (classifiers PyPI
accepts, keywords, the issue tracker, the ``examples`` extra)."""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import lightning_shard
from tests.docs.environments import RUN_TIMEOUT, Environments
from tests.docs.page_runs import DECLARABLE
from tests.helpers.dev import needs_dev
from tests.helpers.runner import ROOT, run_command


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv(
    tmp_path: Path, environments: Environments, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_dev("twine")
    monkeypatch.delenv("PYTHONPATH", raising=False)  # NOTE: nothing of the checkout may leak in
    venv = environments.for_extras(frozenset())
    wheel, sdist = environments.wheel, environments.sdist
    assert wheel.name.startswith(f"lightning_shard-{lightning_shard.__version__}-")
    run_command([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)], RUN_TIMEOUT)
    _check_license(wheel, sdist)
    where = run_command(
        [venv.python, "-c", "import lightning_shard as m; print(m.__file__, m.__version__)"],
        RUN_TIMEOUT,
        cwd=tmp_path,
    )
    location, version = where.split()[-2:]
    assert Path(location).is_relative_to(venv.path) and version == lightning_shard.__version__
    assert venv.holds(["tests", "lightning_shard"]) == {"lightning_shard"}, "the checkout leaks in"


def _check_license(wheel: Path, sdist: Path) -> None:
    """The Apache-2.0 text in both archives, and ``License-File`` in the wheel's metadata."""
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    info = f"lightning_shard-{lightning_shard.__version__}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"{info}/METADATA").decode()
        assert archive.read(f"{info}/licenses/LICENSE").decode() == license_text
    assert re.search(r"^License-Expression: Apache-2.0$", metadata, re.M), metadata[:2000]
    assert re.search(r"^License-File: LICENSE$", metadata, re.M), metadata[:2000]
    for label in ("Documentation", "Source", "Changelog", "Issues"):
        assert re.search(rf"^Project-URL: {label}, https://", metadata, re.M), label
    check_metadata(metadata)
    with tarfile.open(sdist) as archive:
        member = archive.extractfile(f"lightning_shard-{lightning_shard.__version__}/LICENSE")
        assert member is not None and member.read().decode() == license_text


def check_metadata(metadata: str) -> None:
    """The wheel's ``METADATA``: classifiers PyPI accepts (a status, the Python versions ``Requires-Python``
    admits), keywords, the issue tracker, and an ``examples`` extra holding what the pages import."""
    accepted = needs_dev("trove_classifiers").classifiers
    classifiers = re.findall(r"^Classifier: (.+)$", metadata, re.M)
    assert classifiers and set(classifiers) <= accepted, sorted(set(classifiers) - accepted)
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    (floor,) = re.findall(r"^Requires-Python: >=3\.(\d+)$", metadata, re.M)
    versions = sorted(int(c.rsplit(".", 1)[1]) for c in classifiers if re.fullmatch(r".*Python :: 3\.\d+", c))
    assert versions and versions[0] == int(floor), (versions, floor)
    (keywords,) = re.findall(r"^Keywords: (.+)$", metadata, re.M)
    assert {"pytorch", "lightning", "distributed"} <= set(keywords.split(","))
    assert re.search(r"^Project-URL: Issues, https://github\.com/.+/issues$", metadata, re.M)
    assert re.search(r"^Provides-Extra: examples$", metadata, re.M)
    examples = set(re.findall(r'^Requires-Dist: ([\w-]+).*; extra == "examples"$', metadata, re.M))
    assert set(DECLARABLE) - {"litdata"} <= examples, ("the pages import", DECLARABLE)


def _built_metadata() -> str:
    """The ``METADATA`` the wheel would have, from this tree's ``pyproject.toml`` (no wheel built)."""
    return needs_dev("build.util").project_wheel_metadata(ROOT, isolated=False).as_string()


def test_the_metadata_check_finds_a_classifier_pypi_refuses() -> None:
    built = _built_metadata()
    check_metadata(built)
    with pytest.raises(AssertionError, match="Framework :: Lightning"):
        check_metadata(built.replace("Classifier: Typing :: Typed", "Classifier: Framework :: Lightning"))
    with pytest.raises(AssertionError):
        check_metadata(re.sub(r"^Provides-Extra: examples\n", "", built, flags=re.M))
