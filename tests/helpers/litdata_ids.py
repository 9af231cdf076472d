"""Small LitData datasets written with the real ``litdata.optimize``: sample ``i`` is ``{"id": i}``.

``litdata`` is a test dependency installed by the Makefile's set-up (without ``torchvision``); a test module
that needs it calls ``require_litdata()`` first, which skips it with the set-up command when it is absent.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.runner import run_command

IDS, CHUNK = 50, 8
"""The datasets' size and chunk size: 7 chunks, the last one of 2 ids."""


def require_litdata() -> ModuleType:
    """The ``litdata`` module, or a skip naming the set-up that installs it."""
    return pytest.importorskip(
        "litdata", reason="LitData is installed by `make .venv/.installed` (the Makefile's set-up)"
    )


def sample(index: int) -> dict[str, int]:
    return {"id": index}


def session_ids(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The path of ids ``0 .. IDS - 1`` in chunks of ``CHUNK``, written once per test session.

    NOTE: written by a process of its own: ``litdata.optimize`` sets the process's default start method to
    ``"spawn"`` (and leaves queue threads and a SIGINT handler), so every later ``DataLoader`` of this
    pytest worker without a ``multiprocessing_context`` would start its workers by importing torch anew.
    """
    directory = tmp_path_factory.getbasetemp() / "litdata_ids"
    if not (directory / "index.json").is_file():
        run_command([sys.executable, "-m", "tests.helpers.litdata_ids", str(directory)], timeout=300)
    return str(directory)


def write_ids(directory: Path, count: int = IDS, chunk_size: int = CHUNK) -> str:
    """Write ids ``0 .. count - 1`` as a LitData dataset in ``directory``; return its path."""
    litdata = require_litdata()
    # NOTE: one writer process (litdata starts it even for one): each costs a Python start-up.
    litdata.optimize(
        fn=sample,
        inputs=list(range(count)),
        output_dir=str(directory),
        chunk_size=chunk_size,
        num_workers=1,
        verbose=False,
    )
    return str(directory)


if __name__ == "__main__":
    write_ids(Path(sys.argv[1]))
