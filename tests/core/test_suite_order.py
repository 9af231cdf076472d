"""The order ``make test`` hands the test files out in (``tests/conftest.py``) names files that exist: a
renamed file would otherwise drop silently to the end, where it makes one worker run alone."""

from __future__ import annotations

from tests.conftest import LONGEST_FIRST
from tests.helpers.runner import ROOT


def test_the_longest_files_first_are_test_files() -> None:
    missing = [path for path in LONGEST_FIRST if not (ROOT / path).is_file()]
    assert not missing, f"tests/conftest.py LONGEST_FIRST names no such files: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
