"""Forcing the race at the end of a run that docs/DESIGN.md, "No hangs", describes, so that a test of it fails
without the fix instead of once in many runs.

A gloo worker thread frees each finished all-reduce of DDP's backward, and that needs the GIL (torch keeps a
Python object in the thread-local state of every backward). Once forced, it runs only when its process's
main thread waits: its threads get ``SCHED_IDLE``, the lowest priority Linux has, and the process is
pinned to one core. Whoever then drops the group's last reference while holding the GIL waits for that
thread forever (``del model`` after ``destroy_process_group()``: 6 of 6 single-process runs hung before the
fix, ``tests/core/test_exit.py``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch.distributed as dist

ENV = "LIGHTNING_SHARD_TEST_IDLE_GLOO"
"""Set to ``1`` in a launch's environment: ``idle_gloo_if_asked`` forces the race in each of its ranks."""


def idle_gloo_if_asked() -> None:
    """With ``ENV=1``: every later ``init_process_group`` of this process gives the threads it starts (gloo's
    workers and its transport loop) ``SCHED_IDLE`` and pins the process to one core (``rank % cores``)."""
    if os.environ.get(ENV) != "1":
        return
    init = dist.init_process_group

    @functools.wraps(init)
    def init_idle(*args: Any, **kwargs: Any) -> None:
        before = _threads()
        init(*args, **kwargs)
        cores = sorted(os.sched_getaffinity(0))
        core = cores[dist.get_rank() % len(cores)]
        for thread in _threads():  # NOTE: an affinity is per thread; later threads and processes inherit it
            os.sched_setaffinity(thread, {core})
        for thread in _threads() - before:
            os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))

    # NOTE: Lightning calls `torch.distributed.init_process_group` by attribute, at each call.
    dist.init_process_group = init_idle


def _threads() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/task")}
