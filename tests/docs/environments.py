"""Fresh virtual environments for the documentation's examples, each holding what its pages declare.

The wheel ``python -m build`` makes from this tree installs into a fresh virtual environment (torch 2.13.0
CPU first, as the Makefile does, then the wheel with its declared dependencies): the pages whose
``**Packages**:`` line names ``lightning_shard`` only run there. Each other set of extras a page declares
(``tests/docs/blocks.py``, ``extras``) gets an environment of its own, a clone of that one with those
packages added, so no page sees a package another page declared. Every ``pip`` call runs under
``tests/torch-constraints.txt`` (nothing replaces torch) and outside the repository, without
``PYTHONPATH``: nothing of the checkout can leak in.

The environments are built once per test session, by whichever pytest worker asks first (the other waits
on a file lock), in the directory pytest-xdist's workers share.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import requires
from pathlib import Path

import pytest
from filelock import FileLock

from tests.helpers.runner import ROOT, run_command

INSTALL_TIMEOUT = 1200.0
"""Generous: ``pip -q`` prints nothing while it installs (torch is a large wheel to unpack, from pip's cache,
a minute on a busy 2-core machine); this bound only ends a hang."""
RUN_TIMEOUT = 300.0
TORCH_PIN = ROOT / "tests" / "torch-constraints.txt"


def makefile_words(name: str) -> list[str]:
    """The words of the Makefile's ``NAME := ...`` (one source for how LitData installs)."""
    line = re.search(rf"^{name} := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert line is not None, f"no {name} in the Makefile"
    return shlex.split(line[1])


def _requirement(package: str) -> str:
    """``package`` as an extra of ``pyproject.toml`` (``examples``) requires it (so the versions are those
    ``.venv`` holds)."""
    extras = [r.split(";")[0] for r in requires("lightning_shard") or [] if "extra ==" in r]
    found = [r for r in extras if re.split(r"[\[<>=!~\s]", r, maxsplit=1)[0] == package]
    assert found, f"{package} is not in the `examples` extra of pyproject.toml"
    return found[0]


class Environment:
    """A virtual environment at ``path`` and how to install into it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.python = str(path / "bin" / "python")

    def pip(self, *args: str, pinned: bool = True) -> None:
        # NOTE: run in the environment's own directory: outside the repository.
        constraint = ["-c", str(TORCH_PIN)] if pinned else []
        run_command([self.python, "-m", "pip", *args, *constraint], INSTALL_TIMEOUT, cwd=self.path)

    def add(self, packages: frozenset[str]) -> None:
        """Install ``packages``; LitData as the Makefile does: without its dependencies (it requires
        ``torchvision``, whose only build for torch 2.13 is a CUDA one that fails to load), then those less
        ``torchvision``."""
        plain = sorted(packages - {"litdata"})
        if plain:
            self.pip("install", "-q", *map(_requirement, plain))
        if "litdata" in packages:
            self.pip("install", "-q", "--no-deps", *makefile_words("LITDATA"))
            self.pip("install", "-q", *makefile_words("LITDATA_DEPS"))

    def holds(self, modules: list[str]) -> set[str]:
        """Which of ``modules`` are importable here (looked up, not imported)."""
        code = f"import importlib.util as u; print(*[m for m in {modules!r} if u.find_spec(m)])"
        return set(run_command([self.python, "-c", code], RUN_TIMEOUT, cwd=self.path).split())


@contextmanager
def outside_the_checkout() -> Iterator[None]:
    """No ``PYTHONPATH`` (e.g. ``=<repository>``) for the processes started meanwhile."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONPATH", raising=False)
        yield


class Environments:
    """The wheel, the sdist and the page environments, built once in ``root`` for every pytest worker."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dist = root / "dist"
        self.base = Environment(root / "wheel")

    @property
    def wheel(self) -> Path:
        (wheel,) = self.dist.glob("lightning_shard-*.whl")
        return wheel

    @property
    def sdist(self) -> Path:
        (sdist,) = self.dist.glob("lightning_shard-*.tar.gz")
        return sdist

    def for_extras(self, packages: frozenset[str]) -> Environment:
        """The environment of the pages that declare ``packages`` beyond ``lightning_shard``: built on first
        use, under a lock of its own (two workers may ask for different ones at once)."""
        if not packages:
            return self._built(self.base, self._build_base)
        name = "-".join(sorted(packages))
        return self._built(Environment(self.root / name), lambda env: self._build_extras(env, packages))

    def _built(self, env: Environment, build: Callable[[Environment], None]) -> Environment:
        ready, failed = (env.path.with_name(f"{env.path.name}.{state}") for state in ("ready", "failed"))
        # NOTE: a lock, not a wait: the other worker holds it while it builds (each step bounded), and the
        # OS releases it if that worker dies.
        with FileLock(str(env.path.with_name(env.path.name + ".lock"))):
            if failed.exists():
                pytest.fail(f"building {env.path.name} failed in an earlier test:\n{failed.read_text()}")
            if not ready.exists():
                try:
                    with outside_the_checkout():
                        build(env)
                except BaseException as error:  # noqa: BLE001 - recorded, so that no later test builds again
                    failed.write_text(str(error)[-6000:])
                    raise
                ready.touch()
        return env

    def _build_base(self, env: Environment) -> None:
        run_command([sys.executable, "-m", "build", "--outdir", str(self.dist), str(ROOT)], INSTALL_TIMEOUT)
        run_command([sys.executable, "-m", "venv", str(env.path)], INSTALL_TIMEOUT, cwd=self.root)
        # NOTE: torch first, pinned: the CPU build is cached; letting the wheel pull torch would fetch CUDA.
        env.pip("install", "-q", "torch==2.13.0", pinned=False)
        env.pip("install", "-q", str(self.wheel))
        env.pip("check", pinned=False)

    def _build_extras(self, env: Environment, packages: frozenset[str]) -> None:
        base = self.for_extras(frozenset())
        # NOTE: a clone of hard links (seconds, no copy of torch's gigabyte): pip removes a file before it
        # writes one in its place, so installing into the clone leaves the wheel's environment as it was
        # (the test checks that it does not find the extras). The clone's python is the same symlink, and
        # its `pyvenv.cfg` makes it an environment of its own; `bin/` scripts still name the wheel's one's
        # python, so everything runs as `python -m`.
        run_command(["cp", "-al", str(base.path), str(env.path)], INSTALL_TIMEOUT, cwd=self.root)
        env.add(packages)
