"""No hangs (docs/DESIGN.md, "No hangs"): every failure scenario ends on every process, with the expected error.

Each scenario runs on a real 2-process gloo group through ``run_distributed``, whose ``BOUND`` (per scenario)
kills every process and fails the test if any of them hangs. Each process records what it raised and
how long it took (printed; run with ``-s`` to see them). A training loop is imitated by an
``all_reduce`` after every batch, as DDP's gradient sync does: a process that takes a step the others
do not take would block there.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _set_pg_timeout
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from tests.helpers.datasets import IdMap, IdStream
from tests.helpers.dist import progress, run_distributed

pytestmark = pytest.mark.dist

BOUND = 60.0
"""Seconds after which ``run_distributed`` kills every process: a hang fails instead of stalling."""

COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=3)
"""What a user sets with ``init_process_group(timeout=...)`` (Lightning: ``DDPStrategy(timeout=...)``),
armed on the training loop's group once every process is set up (``armed``)."""


def armed(group: Any) -> Any:
    """``group`` with ``COLLECTIVE_TIMEOUT`` from now on: after a barrier that every process reaches once set
    up. NOTE: a group created with that timeout is bounded by it from its creation, which waits for every
    process; on a loaded machine a process can arrive there or at its first step later than 3 s, and the
    scenario would fail before the failure it stages."""
    dist.barrier(group=group)
    _set_pg_timeout(COLLECTIVE_TIMEOUT, group)
    return group


def train(loader: Any, group: Any = None) -> list[list[int]]:
    """Iterate ``loader`` as a DDP training loop would: one collective after every batch."""
    seen = []
    for batch in loader:
        seen.append(batch.tolist())
        dist.all_reduce(torch.ones(1), group=group)
    return seen


def outcome(run: Callable[[], Any]) -> dict[str, Any]:
    """What ``run`` returned or raised on this process, and how long it took."""
    start = time.monotonic()
    try:
        value = run()
    except Exception as error:  # noqa: BLE001 - the error is what the scenarios check
        return {"error": type(error).__name__, "message": str(error), "seconds": time.monotonic() - start}
    return {"error": None, "value": value, "seconds": time.monotonic() - start}


def report(name: str, results: list[dict[str, Any]]) -> None:
    times = ", ".join(
        f"process {rank}: {result['error'] or 'finished'} after {result['seconds']:.3f}s"
        for rank, result in enumerate(results)
    )
    print(f"[{name}] {times}")


# -- scenarios that leave the group usable, run one after the other in a single launch --------------
def dispatch_with_failing_data(rank: int, iterable: bool) -> dict[str, Any]:
    """(a) Process 0's dataset raises while it loads a batch to dispatch."""
    dataset = IdStream(16, bad=10) if iterable else IdMap(16, bad=10)
    loader = prepare_data_loader(DataLoader(dataset, batch_size=2), dispatch_batches=True, put_on_device=True)
    seen: list[list[int]] = []

    def run() -> None:
        for batch in loader:
            seen.append(batch.tolist())
            dist.all_reduce(torch.ones(1))

    return {**outcome(run), "seen": seen}


def iterable_of_length(rank: int, lengths: list[int]) -> dict[str, Any]:
    """(c) Shard mode over an iterable dataset whose stream has another length on each process."""
    stream = IdStream(lengths[rank])
    # NOTE: declared the same everywhere, so that the end agreement, not the same-stream check (which would
    # see the streams differ at their second global batch), is what stops them.
    stream.splits_by_rank = False  # type: ignore[attr-defined]
    loader = prepare_data_loader(DataLoader(stream, batch_size=2))
    return outcome(lambda: train(loader))


def dispatch_until_process_0_ends(rank: int, iterable: bool) -> dict[str, Any]:
    """(d) Dispatch: the epoch ends when process 0's data does."""
    # NOTE: only process 0 reads; the other processes' copies (here empty) are never iterated.
    length = 7 if rank == 0 else 0
    dataset = IdStream(length) if iterable else IdMap(length)
    loader = prepare_data_loader(DataLoader(dataset, batch_size=2), dispatch_batches=True, put_on_device=True)
    return {**outcome(lambda: train(loader)), "len": None if iterable or rank else len(loader)}


SCENARIOS: dict[str, tuple[Callable[..., dict[str, Any]], Any]] = {
    "dispatch, process 0's map-style data raises": (dispatch_with_failing_data, False),
    "dispatch, process 0's iterable data raises": (dispatch_with_failing_data, True),
    "shard, iterable streams of 10 and 6 elements": (iterable_of_length, [10, 6]),
    "shard, iterable streams of 0 and 5 elements": (iterable_of_length, [0, 5]),
    "shard, iterable streams of 7 elements each": (iterable_of_length, [7, 7]),
    "dispatch, process 0's map-style data ends": (dispatch_until_process_0_ends, False),
    "dispatch, process 0's iterable data ends": (dispatch_until_process_0_ends, True),
}


def run_scenarios(rank: int, world_size: int) -> dict[str, dict[str, Any]]:
    """Every scenario in turn, each reported when it ends: ``BOUND`` then bounds each one."""
    results = {}
    for name, (scenario, argument) in SCENARIOS.items():
        results[name] = scenario(rank, argument)
        progress(name)
    return results


@pytest.fixture(scope="module")
def scenarios() -> dict[str, list[dict[str, Any]]]:
    """Each scenario's outcome on process 0 and process 1 (one launch for all of them)."""
    by_rank = run_distributed(run_scenarios, 2, timeout=BOUND)
    results = {name: [by_rank[0][name], by_rank[1][name]] for name in SCENARIOS}
    for name, outcomes in results.items():
        report(name, outcomes)
    return results


@pytest.mark.parametrize("kind", ["map-style", "iterable"])
def test_dispatch_failure_on_process_0_reaches_every_process(
    scenarios: dict[str, list[dict[str, Any]]], kind: str
) -> None:
    process0, process1 = scenarios[f"dispatch, process 0's {kind} data raises"]
    assert process0["error"] == "OSError" and "is corrupt" in process0["message"]
    assert process1["error"] == "RuntimeError", process1
    assert "Process 0 failed while loading" in process1["message"]
    assert "OSError" in process1["message"] and "10 is corrupt" in process1["message"]
    # Both stopped after the same step: no process took a step (a collective) the other did not.
    assert process0["seen"] == [[0, 1]] and process1["seen"] == [[2, 3]]


def test_iterable_streams_of_different_lengths_stop_every_process_together(
    scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    outcomes = scenarios["shard, iterable streams of 10 and 6 elements"]
    for result in outcomes:
        # Process 0 would have a third batch, process 1 only two: both raise at the same fetch, before
        # either takes a step the other would not take.
        assert result["error"] == "RuntimeError", result
        assert "ran out on processes [1] of 2 after 2 batches" in result["message"]
        assert "same stream on every process" in result["message"]
    assert outcomes[0]["message"] == outcomes[1]["message"]


def test_an_iterable_stream_empty_on_one_process_stops_every_process_at_once(
    scenarios: dict[str, list[dict[str, Any]]],
) -> None:
    for result in scenarios["shard, iterable streams of 0 and 5 elements"]:
        assert result["error"] == "RuntimeError", result
        assert "ran out on processes [0] of 2 after 0 batches" in result["message"]


def test_iterable_streams_of_equal_lengths_run_to_the_end(scenarios: dict[str, list[dict[str, Any]]]) -> None:
    outcomes = scenarios["shard, iterable streams of 7 elements each"]
    assert [result["value"] for result in outcomes] == [[[0, 1], [4, 5]], [[2, 3], [6, 0]]]


@pytest.mark.parametrize("kind", ["map-style", "iterable"])
def test_dispatch_stops_every_process_when_process_0_runs_out(
    scenarios: dict[str, list[dict[str, Any]]], kind: str
) -> None:
    process0, process1 = scenarios[f"dispatch, process 0's {kind} data ends"]
    assert process0["error"] is None and process1["error"] is None, (process0, process1)
    # 7 elements in global batches of 4: the last one is completed from the start of the epoch.
    assert process0["value"] == [[0, 1], [4, 5]]
    assert process1["value"] == [[2, 3], [6, 0]]
    if kind == "map-style":
        assert process0["len"] == 2


# -- (b) one process's dataset raises in shard mode --------------------------------------------------
def shard_with_failing_sample(rank: int, world_size: int, failing_process_stays: bool) -> dict[str, Any]:
    group = dist.new_group()
    # Sample 10 is in process 1's shard only: in batches of 2, process 1 gets [2, 3], [6, 7], [10, 11] ...
    loader = prepare_data_loader(DataLoader(IdMap(16, bad=10), batch_size=2))
    group = armed(group)
    result = outcome(lambda: train(loader, group))
    if rank == 1 and failing_process_stays:
        # NOTE: the process catches the error and stays in the group without joining its collectives
        # (e.g. it is saving a checkpoint or logging); it leaves after the others gave up on it.
        time.sleep(COLLECTIVE_TIMEOUT.total_seconds() + 2)
    return result


@pytest.mark.parametrize(
    "failing_process_stays", [False, True], ids=["failing-process-exits", "failing-process-stays"]
)
def test_shard_failure_on_one_process_surfaces_on_the_others(failing_process_stays: bool) -> None:
    results = run_distributed(shard_with_failing_sample, 2, failing_process_stays, timeout=BOUND)
    report(f"shard, process 1's data raises ({'stays' if failing_process_stays else 'exits'})", results)
    process0, process1 = results
    assert process1["error"] == "OSError" and "sample 10 is corrupt" in process1["message"]
    # Process 0 has its own, healthy shard: it is blocked only in the next collective of the training
    # loop, and that collective fails instead of waiting for ever.
    assert process0["error"] == "RuntimeError", process0
    if failing_process_stays:
        assert "Timed out waiting 3000ms" in process0["message"]
    else:
        # NOTE: gloo says "closed" or, when the exit races its read (a loaded machine), "reset": either way
        # the peer's exit reached process 0's collective.
        assert re.search(r"Connection (closed|reset) by peer", process0["message"]), process0


# -- (c) an iterable stream that raises on one process only -----------------------------------------
def iterable_failing_on_one_process(rank: int, world_size: int) -> dict[str, Any]:
    group = dist.new_group()
    loader = prepare_data_loader(DataLoader(IdStream(12, bad=5 if rank == 1 else None), batch_size=2))
    group = armed(group)
    return outcome(lambda: train(loader, group))


def test_iterable_stream_raising_on_one_process_does_not_hang_the_other() -> None:
    results = run_distributed(iterable_failing_on_one_process, 2, timeout=BOUND)
    report("shard, iterable stream raises on process 1", results)
    process0, process1 = results
    assert process1["error"] == "OSError"
    # Process 0 waits for process 1 in the end-of-stream agreement (on the default group, so bounded by
    # `init_process_group(timeout=...)`), which fails at once here since process 1 left.
    assert process0["error"] == "RuntimeError", process0
