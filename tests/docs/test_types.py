"""mypy checks the Python blocks of the pages as a reader's type checker would (``trainer.strategy.shard_plan``
once failed there: ``Trainer.strategy`` is a ``Strategy``), with the repository's mypy settings.

Each page's untitled blocks make one module (they run in one namespace) and its titled blocks the files
they name; pages whose files share no name are checked in one mypy run, in one directory, so that a page's
``from model import ...`` finds its own ``model.py``.

NOTE: two error codes are off, in each module (an inline setting, so that the repository's mypy cache,
which ``make test`` fills first, still holds for torch and Lightning): torch's stubs type
``DataLoader(dataset)`` and ``DistributedSampler(dataset)`` as taking a ``Dataset``, which the pages'
``range(10)`` and ``list(range(10))`` are not for mypy (they are at run time: anything with ``__len__`` and
``__getitem__``); ``arg-type`` reports that, and ``var-annotated`` the sampler or loader whose type it
then cannot infer.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import Block, blocks, files, page_id, pages, steps
from tests.helpers.dev import needs_dev
from tests.helpers.runner import ROOT, finish

INLINE = '# mypy: disable-error-code="arg-type, var-annotated"\n'
TIMEOUT = 600.0
"""Generous: mypy prints nothing until it is done, and reads torch's and Lightning's stubs once (a minute
on a loaded machine without the repository's cache); this bound only ends a hang."""


def modules(page: Path) -> dict[str, str]:
    """The files mypy checks for ``page``: its titled files, and its untitled blocks as one module."""
    page_blocks = blocks(page)
    untitled = "".join(step.code for step in steps(page_blocks) if isinstance(step, Block))
    own = dict(files(page_blocks))
    if untitled:
        own[f"page_{page_id(page).removesuffix('.md').replace('/', '_').replace('-', '_')}.py"] = untitled
    return {name: INLINE + code for name, code in own.items()}


def groups(all_pages: list[Path]) -> list[dict[str, str]]:
    """The pages' modules in as few directories as their file names allow (no name twice in one)."""
    placed: list[dict[str, str]] = []
    for page in all_pages:
        own = modules(page)
        group = next((group for group in placed if not set(group) & set(own)), None)
        if group is None:
            placed.append(group := {})
        group.update(own)
    return placed


def mypy(where: Path, cache: Path) -> tuple[int, str]:
    """mypy over ``where``'s files, with the repository's settings (``MYPYPATH``: this checkout's package)."""
    settings = ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache)]
    modules = sorted(path.name for path in where.glob("*.py"))
    return finish([sys.executable, "-m", "mypy", *settings, *modules], TIMEOUT, where)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the module's runs, started from a copy of the repository's (``make test`` runs
    mypy first), so that the stubs of torch and Lightning are read once at most."""
    needs_dev("mypy")
    cache = tmp_path_factory.mktemp("mypy") / "cache"
    if (ROOT / ".mypy_cache").is_dir():
        shutil.copytree(ROOT / ".mypy_cache", cache)
    return cache


@pytest.fixture(autouse=True)
def checkout_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYPYPATH", str(ROOT))


def test_the_pages_type_check(tmp_path: Path, cache: Path) -> None:
    for number, group in enumerate(groups(pages())):
        where = tmp_path / f"group{number}"
        where.mkdir()
        for name, code in group.items():
            (where / name).write_text(code)
        returncode, output = mypy(where, cache)
        assert returncode == 0, (
            f"mypy finds in the pages' blocks (files of {sorted(group)}):\n{output[-4000:]}"
        )


def test_a_type_error_in_a_block_is_found(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "page_quickstart.py").write_text(
        f"{INLINE}import lightning as L\n\nprint(L.Trainer(accelerator='cpu').strategy.shard_plan)\n"
    )
    returncode, output = mypy(tmp_path, cache)
    assert returncode == 1 and '"Strategy" has no attribute "shard_plan"' in output


def test_pages_whose_files_share_a_name_are_checked_apart() -> None:
    placed = groups(pages())
    assert sum(len(group) for group in placed) == sum(len(modules(page)) for page in pages())
    assert sum("train.py" in group for group in placed) >= 3, "README, quick start, resume, multi-machine"
