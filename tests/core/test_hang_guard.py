"""The hang guard of ``tests/helpers/runner.py``: a launch that stops printing fails its test with every
process's Python stack, and everything it started is ended (the suite's "nothing hangs" bound)."""

from __future__ import annotations

import os
import re
import select
import sys

import pytest

from tests.helpers.runner import finish

_HANGS = """
import subprocess, sys, time
def wait_forever():
    time.sleep(600)
child = subprocess.Popen([sys.executable, "-c", "import os, time\\ndef wait_forever():\\n    time.sleep(600)\\nprint(os.getpid(), flush=True)\\nwait_forever()"])
print(__import__("os").getpid(), flush=True)
wait_forever()
"""


def _ends(pid: int) -> bool:
    """Whether process ``pid`` exits (a zombie counts) within 60 s: a SIGKILL is delivered at once but takes
    effect when the process next runs, which on a loaded machine may be a while; 60 s only bounds a hang."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([handle], [], [], 60)[0])
    finally:
        os.close(handle)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits on a pidfd (Linux)")
def test_a_silent_launch_fails_with_its_stacks_and_leaves_nothing_alive() -> None:
    # NOTE: 10 s without output is the bound under test: the command sleeps 600 s, so it fires however busy
    # the machine is.
    with pytest.raises(pytest.fail.Exception) as failure:
        finish([sys.executable, "-c", _HANGS], timeout=10)
    message = str(failure.value)
    assert "hung: no output for 10" in message
    pids = [int(pid) for pid in re.findall(r"^(\d+)$", message, re.MULTILINE)]
    assert len(pids) == 2, message
    assert all(_ends(pid) for pid in pids), "the guard ended the launch and its child"
    # NOTE: py-spy's frame lines; where the machine forbids reading another process, its reason instead.
    frames = message.count("wait_forever (<string>:")
    refused = "permission denied" in message.lower() or "not permitted" in message.lower()
    assert frames == 2 or refused, message
