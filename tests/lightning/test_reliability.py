"""Reliability of real 2-process ``lightning.Trainer`` fits with ``ShardStrategy`` (gloo, CPU).

The shard audit of a correct fit and of misused samplers; no hang when training is uneven, when a
process is SIGKILLed (either rank) or stops; and a fit killed mid-epoch, restarted from its last
checkpoint on 2 and on 1 process(es), that loses and repeats no sample. The scenarios run in
``tests/scripts/reliability.py``; each test reads what the processes recorded. Times are printed (``-s``)
and collected in ``benchmarks/RELIABILITY.md``; the tests only bound them, to catch hangs.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.runner import finish, script
from tests.scripts.reliability import FREEZE_TIMEOUT, KILL_AT, LENGTH

pytestmark = pytest.mark.lightning

BOUND = 60.0
"""Seconds from a point after start-up (a signal, or the end of a collective timeout) within which every
surviving process must have failed and exited: a hang never ends, and an error surfaces in well under a
second on idle cores (``benchmarks/RELIABILITY.md``), so 60 s leaves room for 2 cores under a load
average of 10 or more. Start-up itself is not bounded here: the launcher's silence bound catches a hang
there (``LAUNCH_TIMEOUT`` seconds without an output line)."""
LAUNCH_TIMEOUT = 240.0


@dataclass(frozen=True)
class Launch:
    """A finished scenario: its exit code, its output, and when the last process holding it ended."""

    returncode: int
    output: str
    ended: float


def launch(name: str, out: Path, *args: str) -> Launch:
    """Run scenario ``name`` in a new session; wait until every process writing its output has ended."""
    returncode, output = finish(script("reliability", name, str(out), *args), LAUNCH_TIMEOUT)
    return Launch(returncode, output, time.time())


def succeeded(name: str, out: Path, *args: str) -> Launch:
    run = launch(name, out, *args)
    if run.returncode != 0:
        pytest.fail(f"scenario {name} {args} failed ({run.returncode}):\n{run.output[-6000:]}")
    return run


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _steps(run: Path, rank: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / f"steps_rank{rank}.jsonl").read_text().splitlines()]


# -- the shard audit --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("audit")
    return out, succeeded("audit", out).output


def _audits(run: Path) -> list[list[Any]]:
    first, second = _json(run / "audits_rank0.json"), _json(run / "audits_rank1.json")
    assert first == second, "every process holds the same merged audit"
    return first


def test_audit_of_a_correct_fit_is_ok(audited: tuple[Path, str]) -> None:
    out, output = audited
    expected = [
        f"shard audit, epoch {epoch}: 50 samples, 50 covered, 6 duplicates (6 allowed as padding), "
        "0 missing (0 allowed): OK"
        for epoch in (0, 1)
    ]
    assert _audits(out / "correct") == [[0, True, True, expected[0]], [1, True, True, expected[1]]]
    for line in expected:
        assert output.count(line) == 1, "rank 0 logs each epoch's line once"


def test_audit_of_an_epoch_stopped_early_checks_only_duplicates(audited: tuple[Path, str]) -> None:
    ((epoch, ok, complete, summary),) = _audits(audited[0] / "early")
    assert (epoch, ok, complete) == (0, True, False)
    assert (
        "24 covered, 0 duplicates" in summary and "not checked: the epoch stopped before its end" in summary
    )


def test_audit_of_a_dispatched_fit_counts_what_process_0_loaded(audited: tuple[Path, str]) -> None:
    """Process 0 loads both processes' batches; the padding row (45 = 5 x 8 + 5, completed to 6) comes
    from the epoch's head, outside the index source, so it is allowed but not recorded."""
    ((epoch, ok, complete, summary),) = _audits(audited[0] / "dispatch")
    assert (epoch, ok, complete) == (0, True, True)
    assert "45 samples, 45 covered, 0 duplicates (1 allowed as padding), 0 missing (0 allowed): OK" in summary


def test_audit_finds_data_sharded_twice(audited: tuple[Path, str]) -> None:
    """A sampler that keeps only its process's share, sharded again: half of the data is never read."""
    out, _ = audited
    audits = _audits(out / "by_hand")
    assert [(epoch, ok) for epoch, ok, _, _ in audits] == [(0, False), (1, False)]
    assert all("PROBLEM: 24 missing samples (e.g. 1, 3, 5, 8, 10)" in summary for *_, summary in audits)
    assert (out / "by_hand" / "fit_rank0.json").exists(), "without `audit_raise`, the fit goes on"


def test_audit_raise_stops_every_process_together(audited: tuple[Path, str]) -> None:
    """A sampler that shuffles differently on each process: duplicates and missing samples."""
    failures = [_json(audited[0] / "per_rank" / f"failure_rank{rank}.json") for rank in (0, 1)]
    for failure in failures:
        assert failure["error"] == "RuntimeError"
        assert (
            "duplicates beyond the padding" in failure["message"] and "missing samples" in failure["message"]
        )
        assert "`audit_raise=False`" in failure["message"]
    assert failures[0]["message"] == failures[1]["message"]
    print(f"audit_raise: the processes raised {abs(failures[0]['time'] - failures[1]['time']):.3f}s apart")


def test_uneven_training_is_refused_on_every_process(audited: tuple[Path, str]) -> None:
    # NOTE: no bound on the seconds: they include the fit's start-up; both processes recording the
    # refusal (and the launch ending) is what shows that neither hung.
    refusals = [_json(audited[0] / "uneven" / f"refused_rank{rank}.json") for rank in (0, 1)]
    for refusal in refusals:
        assert "`even_batches=False`" in refusal["message"] and "[7, 6]" in refusal["message"]
    print("even_batches=False refused after", [round(refusal["seconds"], 3) for refusal in refusals], "s")


# -- a process killed, then the fit restarted --------------------------------------------------------------
@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Launch]:
    out = tmp_path_factory.mktemp("kill")
    return out, launch("kill", out, "1")


def _after_signal(run: Path, launched: Launch) -> tuple[float, float, float]:
    """Seconds from the signal to: the survivor's error, and the end of every process; the signal time."""
    signalled = _json(run / "signalled.json")["time"]
    (failure,) = [_json(path) for path in run.glob("failure_rank*.json")]
    return failure["time"] - signalled, launched.ended - signalled, signalled


def test_a_killed_rank_1_ends_rank_0_with_an_error(killed: tuple[Path, Launch]) -> None:
    out, launched = killed
    assert launched.returncode == 1, launched.output[-3000:]
    failure = _json(out / "kill" / "failure_rank0.json")
    assert failure["error"] == "RuntimeError" and "by peer" in failure["message"]
    error_after, exit_after, _ = _after_signal(out / "kill", launched)
    assert exit_after < BOUND
    print(
        f"SIGKILL of rank 1: rank 0 raised after {error_after:.3f}s, every process ended after {exit_after:.2f}s"
    )


def test_a_killed_rank_0_ends_rank_1_with_an_error(tmp_path: Path) -> None:
    launched = launch("kill", tmp_path, "0")
    assert launched.returncode == -signal.SIGKILL, launched.output[-3000:]
    failure = _json(tmp_path / "kill" / "failure_rank1.json")
    assert failure["error"] == "RuntimeError" and "by peer" in failure["message"]
    error_after, exit_after, _ = _after_signal(tmp_path / "kill", launched)
    assert exit_after < BOUND
    print(
        f"SIGKILL of rank 0: rank 1 raised after {error_after:.3f}s, every process ended after {exit_after:.2f}s"
    )


def test_a_stopped_peer_ends_the_other_after_the_timeout(tmp_path: Path) -> None:
    """The timeout is armed after the first step, so only the stopped peer can trip it. Rank 0 fails with a
    ``RuntimeError`` (gloo's timeout; newer torch raises its subclass ``DistBackendError``), whatever the
    message's wording ("timeout", "Timed out waiting 20000ms for recv"), not before half the timeout has
    passed since the signal (rank 0 entered the step's collective at most a step before it: well under
    10 s) and within the timeout plus ``BOUND`` (a hang never ends)."""
    launched = launch("freeze", tmp_path)
    run = tmp_path / "freeze"
    assert launched.returncode == 1, launched.output[-3000:]
    assert (run / "armed_rank0.json").exists(), (
        f"rank 0 failed before its first step:\n{launched.output[-3000:]}"
    )
    failure = _json(run / "failure_rank0.json")
    assert "RuntimeError" in failure["kinds"], failure
    error_after, _, signalled = _after_signal(run, launched)
    assert _json(run / "armed_rank0.json")["time"] <= signalled, "armed before rank 1 stopped"
    timeout = FREEZE_TIMEOUT.total_seconds()
    assert error_after >= timeout / 2, f"rank 0 raised {error_after:.1f}s after the signal: not the timeout"
    assert error_after < timeout + BOUND, f"rank 0 raised {error_after:.1f}s after the signal: a hang"
    print(
        f"SIGSTOP of rank 1: rank 0 raised {failure['error']} after {error_after:.2f}s "
        f"(timeout {timeout:.0f}s, armed at step 1)"
    )


def test_the_killed_fit_checkpointed_every_2_steps(killed: tuple[Path, Launch]) -> None:
    out, _ = killed
    assert sorted(path.name for path in (out / "kill" / "checkpoints").glob("*.ckpt")) == [
        "step=2.ckpt",
        "step=4.ckpt",
    ]
    assert [step["step"] for step in _steps(out / "kill", 1)] == list(range(1, KILL_AT + 1))


@pytest.fixture(scope="module")
def restarted(killed: tuple[Path, Launch]) -> Path:
    out, _ = killed
    for devices in ("2", "1", "3"):
        succeeded("restart", out, devices)
    single = launch("kill", out, "0", "1")  # the only process killed after step 5
    assert single.returncode == -signal.SIGKILL, single.output[-3000:]
    succeeded("restart", out, "2", "1")
    return out


def _checkpointed_ids(out: Path) -> list[int]:
    """The ids of the steps the last checkpoint (step 4) holds: the first 4 steps of each process."""
    return [
        i for rank in (0, 1) for step in _steps(out / "kill", rank) if step["step"] <= 4 for i in step["ids"]
    ]


def _resumed_ids(run: Path, world_size: int) -> list[int]:
    return [
        i
        for rank in range(world_size)
        for step in _steps(run, rank)
        if step["epoch"] == 0
        for i in step["ids"]
    ]


@pytest.mark.long
def test_restart_on_2_processes_loses_and_repeats_nothing(restarted: Path) -> None:
    before, after = _checkpointed_ids(restarted), _resumed_ids(restarted / "restart2", 2)
    counts = Counter(before + after)
    assert sorted(counts) == list(range(LENGTH)), "nothing lost"
    duplicated = {i for i, count in counts.items() if count > 1}
    first_step = [step["ids"] for rank in (0, 1) for step in _steps(restarted / "kill", rank)[:1]]
    # The epoch's last step is padded with its first 6 samples (the documented padding), nothing else.
    assert duplicated == set(first_step[0] + first_step[1][:2]) and len(before + after) == 56
    for rank in (0, 1):
        killed = [step for step in _steps(restarted / "kill", rank) if step["step"] > 4]
        resumed = _steps(restarted / "restart2", rank)
        assert [step["ids"] for step in resumed[: len(killed)]] == [step["ids"] for step in killed]
    print(f"restart on 2: {len(before)} ids before the checkpoint + {len(after)} after, 0 lost, 6 padded")


@pytest.mark.long
def test_restart_on_1_process_loses_and_repeats_nothing(restarted: Path) -> None:
    before, after = _checkpointed_ids(restarted), _resumed_ids(restarted / "restart1", 1)
    assert sorted(before + after) == list(range(LENGTH)), "each sample exactly once"
    assert [step["batch_idx"] for step in _steps(restarted / "restart1", 0)][:5] == [4, 5, 6, 7, 8]
    assert sorted(
        i for step in _steps(restarted / "restart1", 0) if step["epoch"] == 1 for i in step["ids"]
    ) == list(range(LENGTH))
    print(f"restart on 1: {len(before)} ids before the checkpoint + {len(after)} after, 0 lost, 0 repeated")


@pytest.mark.long
def test_restart_on_3_processes_loses_and_repeats_nothing(restarted: Path) -> None:
    before, after = _checkpointed_ids(restarted), _resumed_ids(restarted / "restart3", 3)
    counts = Counter(before + after)
    assert sorted(counts) == list(range(LENGTH)), "nothing lost"
    # 18 samples left on 3 processes of 4: 2 steps of 12, the last padded with 6.
    assert len(after) == 24 and sum(counts.values()) - LENGTH == 6
    print(f"restart on 3: {len(before)} ids before the checkpoint + {len(after)} after, 0 lost, 6 padded")


@pytest.mark.long
def test_a_fit_killed_on_1_process_restarts_on_2(restarted: Path) -> None:
    before = [i for step in _steps(restarted / "kill1", 0) if step["step"] <= 4 for i in step["ids"]]
    after = _resumed_ids(restarted / "restart1to2", 2)
    counts = Counter(before + after)
    assert len(before) == 16 and sorted(counts) == list(range(LENGTH)), "nothing lost"
    assert len(after) == 40 and sum(counts.values()) - LENGTH == 6, "34 left: 5 steps of 8, 6 padded"
    assert [step["batch_idx"] for step in _steps(restarted / "restart1to2", 1)][:5] == [4, 5, 6, 7, 8]
    print(f"restart 1 -> 2: {len(before)} ids before the checkpoint + {len(after)} after, 0 lost, 6 padded")


@pytest.mark.long
@pytest.mark.parametrize(
    ("run", "padding", "recorded", "next_padding"),
    [("restart2", 6, 32, 6), ("restart1", 0, 32, 0), ("restart3", 6, 32, 10), ("restart1to2", 6, 16, 6)],
)
def test_restarted_epochs_are_audited_whole(
    restarted: Path, run: str, padding: int, recorded: int, next_padding: int
) -> None:
    """The checkpoint carries the epoch's record: the audit of the resumed epoch covers all of it."""
    (epoch0, epoch1) = _json(restarted / run / "audits_rank0.json")
    assert epoch0[:3] == [0, True, True] and epoch1[:3] == [1, True, True]
    assert epoch0[3] == (
        f"shard audit, epoch 0: 50 samples, 50 covered, {padding} duplicates ({padding} allowed as padding), "
        f"0 missing (0 allowed), {recorded} of the records from before the resume: OK"
    )
    assert f"50 covered, {next_padding} duplicates ({next_padding} allowed as padding)" in epoch1[3]
