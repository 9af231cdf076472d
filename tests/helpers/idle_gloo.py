"""Forcing the race at the end of a run that docs/DESIGN.md, "No hangs", describes, so that a test of it fails
without the fix instead of once in many runs.

A gloo worker thread frees each finished all-reduce of DDP's backward, and that needs the GIL (torch keeps a
Python object in the thread-local state of every backward). Forced, it runs only when its process's main
thread waits: gloo's threads get ``SCHED_IDLE``, the lowest priority Linux has, and the process is pinned to
one core. Whoever then drops the group's last reference while holding the GIL waits for that thread forever
(``del model`` after ``destroy_process_group()``: 6 of 6 single-process runs hung before the fix,
``tests/core/test_exit.py``). Scripts force it just before their last backward, not from the start: a whole
fit's collectives on idle-priority threads crawl on a loaded machine.
"""

from __future__ import annotations

import contextlib
import os

import torch.distributed as dist

ENV = "LIGHTNING_SHARD_TEST_IDLE_GLOO"
"""Set to ``1`` in a launch's environment: ``idle_gloo_if_asked`` forces the race in each of its ranks."""
GLOO_THREADS = ("pt_gloo_runloop", "gloo_tcp_loop")
"""The names torch 2.13 gives gloo's worker threads and its transport loop."""


def idle_gloo_if_asked() -> None:
    """With ``ENV=1``: from now on this process runs on one core (its rank modulo the cores) and gloo's threads
    at ``SCHED_IDLE``.

    Raises:
        RuntimeError: if no thread has a name of ``GLOO_THREADS`` (torch renamed them: nothing is forced).
    """
    if os.environ.get(ENV) != "1":
        return
    names = {thread: _name(thread) for thread in _threads()}
    gloo = [thread for thread, name in names.items() if name in GLOO_THREADS]
    if not gloo:
        raise RuntimeError(
            f"no thread named {GLOO_THREADS} among {sorted(set(names.values()))}: torch renamed them"
        )
    cores = sorted(os.sched_getaffinity(0))
    core = cores[(dist.get_rank() if dist.is_initialized() else 0) % len(cores)]
    for thread in names:  # NOTE: an affinity is per thread; threads and processes started later inherit it
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            os.sched_setaffinity(thread, {core})
    for thread in gloo:
        os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))


def _threads() -> list[int]:
    return [int(name) for name in os.listdir("/proc/self/task")]


def _name(thread: int) -> str:
    try:
        with open(f"/proc/self/task/{thread}/comm") as comm:
            return comm.read().strip()
    except OSError:  # ended meanwhile
        return ""
