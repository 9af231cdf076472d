"""Every test, and every process a test starts, runs single-threaded BLAS: the machines have 2 cores.

The test files that take longest run first (``make test``: two pytest-xdist workers, a file each at a
time, in this order with ``--no-loadscope-reorder``), so that the two workers end together instead of one
running a long file alone at the end; the others follow in collection order.
"""

import multiprocessing
import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

LONGEST_FIRST = [
    # NOTE: builds the pages' environments (the wheel, torch into a fresh venv) that test_wheel.py uses too.
    "tests/docs/test_docs_examples.py",
    "tests/docs/test_docs_examples_2.py",  # NOTE: only pages marked `long` (`make test-long`)
    "tests/lightning/test_elastic.py",
    "tests/lightning/test_reliability.py",
    "tests/lightning/test_fit.py",
    "tests/lightning/test_combinations.py",
    "tests/lightning/test_resume.py",
    "tests/lightning/test_own_sampler.py",
    "tests/lightning/test_evaluation.py",
    "tests/lightning/test_streams.py",
    "tests/loaders/test_differential.py",
    "tests/lightning/test_litdata.py",
    "tests/lightning/test_to_plain.py",
    "tests/lightning/test_model_parallel.py",
    "tests/core/test_differential.py",
]
"""Per-file totals of ``--durations=0`` in ``make test`` on a quiet 2-core machine (each 20 s to 3 minutes
there); keep the longest first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: position for position, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def _start_method() -> str:
    """The start method a ``multiprocessing`` call without a context uses (the platform's default, the first
    of ``get_all_start_methods()``, until one is set; ``import litdata`` sets that same one)."""
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]


_START_METHOD = _start_method()


@pytest.fixture(autouse=True)
def _start_method_kept() -> Iterator[None]:
    """No test or fixture may change its pytest worker's default start method: with ``"spawn"`` every later
    ``DataLoader`` there without a ``multiprocessing_context`` starts workers that import torch anew
    (minutes of a suite run; ``tests/helpers/litdata_ids.py`` says how ``litdata.optimize`` did it)."""
    yield
    now = _start_method()
    assert now == _START_METHOD, f"the default start method is now {now!r} (was {_START_METHOD!r})"
