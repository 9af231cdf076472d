"""Timing as ``timeit`` does, shared by the benchmarks: the garbage collector collected before and disabled
during each timed run, runs of the compared sides alternating, the median reported."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(run: Callable[[], Any], clock: Callable[[], float] = time.process_time) -> float:
    """One call of ``run``, timed as ``timeit`` does: garbage collected before, the collector off during.

    CPU time by default (single-process work: robust to the load of a shared machine).
    """
    gc.collect()
    gc.disable()
    try:
        start = clock()
        run()
        return clock() - start
    finally:
        gc.enable()


def alternating(runs: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Every run's ``repeats`` times, the runs alternating (their order rotating each round) so that all
    see the same machine state."""
    names, times = list(runs), {name: [] for name in runs}
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timed(runs[name]))
    return times


def alternate(ours: Callable[[], Any], theirs: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median CPU times of both, runs alternating."""
    times = alternating({"ours": ours, "theirs": theirs}, repeats)
    return statistics.median(times["ours"]), statistics.median(times["theirs"])
