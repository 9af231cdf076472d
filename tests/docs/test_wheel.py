"""The wheel installs and works: built from this tree, installed into a fresh virtual environment (torch
2.13.0 CPU first, as the Makefile does, then the wheel with its declared dependencies), and the quick
starts (the README's and the site's) run from outside the repository, their shown output checked. A package
file or dependency missing from the wheel fails here, and so do a long description the package index
would not render (``twine check --strict``), missing project URLs and a LICENSE missing from the sdist or
the wheel."""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import lightning_shard
from tests.docs.blocks import DOCS, README, blocks, files, missing_output, outputs
from tests.helpers.runner import ROOT, run_command

INSTALL_TIMEOUT = 1200.0
"""Generous: on a 2-core machine the installs take one to two minutes from pip's cache; this bounds a hang."""
RUN_TIMEOUT = 300.0


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs_the_quick_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NOTE: nothing of the checkout may leak into the fresh environment (e.g. PYTHONPATH=<repository>).
    monkeypatch.delenv("PYTHONPATH", raising=False)
    dist, venv, run = tmp_path / "dist", tmp_path / "venv", tmp_path / "run"
    run_command([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], INSTALL_TIMEOUT)
    (wheel,) = dist.glob("lightning_shard-*.whl")
    (sdist,) = dist.glob("lightning_shard-*.tar.gz")
    assert wheel.name.startswith(f"lightning_shard-{lightning_shard.__version__}-")
    run_command([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)], RUN_TIMEOUT)
    _check_license(wheel, sdist)

    run_command([sys.executable, "-m", "venv", str(venv)], INSTALL_TIMEOUT)
    python = str(venv / "bin" / "python")
    # NOTE: torch first, pinned: the CPU build is cached; letting the wheel pull torch would fetch CUDA.
    run_command([python, "-m", "pip", "install", "-q", "torch==2.13.0"], INSTALL_TIMEOUT)
    run_command([python, "-m", "pip", "install", "-q", str(wheel)], INSTALL_TIMEOUT)
    run_command([python, "-m", "pip", "check"], RUN_TIMEOUT)

    where = run_command(
        [python, "-c", "import lightning_shard as m; print(m.__file__, m.__version__)"],
        RUN_TIMEOUT,
        cwd=tmp_path,
    )
    location, version = where.split()[-2:]
    assert Path(location).is_relative_to(venv) and version == lightning_shard.__version__
    # NOTE: the README's quick start is what the package index shows a pip user; the site's is longer.
    for page in (README, DOCS / "quickstart.md"):
        output = _run_page_script(python, page, run / page.stem)
        assert re.search(
            r"lightning_shard plan: 2 processes \(shard\), batch size 16 per process and 32 global", output
        )
        for shown in outputs(page):
            assert missing_output(shown, output) == [], page.name


def _run_page_script(python: str, page: Path, where: Path) -> str:
    """``train.py`` of ``page`` run by ``python`` in ``where``, outside the repository; its output."""
    where.mkdir(parents=True)
    for name, code in files(blocks(page)).items():
        (where / name).write_text(code)
    return run_command([python, "train.py"], RUN_TIMEOUT, cwd=where)


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
    for label in ("Documentation", "Source", "Changelog"):
        assert re.search(rf"^Project-URL: {label}, https://", metadata, re.M), label
    with tarfile.open(sdist) as archive:
        member = archive.extractfile(f"lightning_shard-{lightning_shard.__version__}/LICENSE")
        assert member is not None and member.read().decode() == license_text
