"""The combination harness itself (docs/DESIGN.md, "Combination harness"), cheapest first: the generator
covers every pair, the rules, the verdict finds a lost, a repeated and a reordered sample; and the
launcher's watchdog tells a hang from a slow run and kills what the hung launch started."""

from __future__ import annotations

import os
import random
import select
import sys
import textwrap
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest

from tests.helpers.runner import finish
from tests.matrix import check
from tests.matrix.cells import (
    AXES,
    REPLACEMENT,
    Cell,
    _random_cell,
    epoch_batch_sizes,
    invalid,
    loader_batch,
    matrix,
    refusal,
    refusal_at_restart,
    sample,
    split_short,
)
from tests.matrix.test_matrix import KNOWN_DEFECTS, MATRIX_SEED, SAMPLE, SAMPLE_OWN_SAMPLERS


# -- the generator and the rules ---------------------------------------------------------------------------
def test_the_matrix_covers_every_pair_of_values_a_valid_cell_holds() -> None:
    cells = matrix(MATRIX_SEED)
    assert all(invalid(cell) is None for cell in cells)
    covered = {pair for cell in cells for pair in combinations([(a, getattr(cell, a)) for a in AXES], 2)}
    rng = random.Random(1)
    for _ in range(3000):
        cell = _random_cell(rng)
        if invalid(cell) is None:
            pairs = set(combinations([(a, getattr(cell, a)) for a in AXES], 2))
            assert pairs <= covered, f"{cell.id}: {sorted(pairs - covered)[:3]} not covered"
    assert 50 < len(cells) < 170, "about 155 cells: the whole matrix runs in about 45 minutes"


def test_the_matrix_and_the_sample_are_seeded() -> None:
    assert matrix(MATRIX_SEED) == matrix(MATRIX_SEED)
    cells = matrix(MATRIX_SEED)
    assert sample(cells, 7, 8) == sample(cells, 7, 8) != sample(cells, 8, 8)


def test_every_daily_sample_holds_cells_of_the_user_s_own_samplers() -> None:
    cheap = [cell for cell in matrix(MATRIX_SEED) if cell.strategy != "model_parallel"]
    for seed in range(20261201, 20261231):
        cells = sample(cheap, seed, SAMPLE, own_samplers=SAMPLE_OWN_SAMPLERS)
        assert len(cells) == SAMPLE, "replaced, not added: the sample's wall time stays"
        assert sum(cell.sampler != "default" for cell in cells) >= SAMPLE_OWN_SAMPLERS


def test_a_cell_id_reads_back() -> None:
    for cell in matrix(MATRIX_SEED)[:20]:
        assert Cell.parse(cell.id) == cell
    with pytest.raises(ValueError, match="unknown axis 'stratgy'"):
        Cell.parse("stratgy=ddp")


def test_rules() -> None:
    assert invalid(Cell(strategy="fabric", feature="accumulate")) == "a Trainer feature in a Fabric loop"
    assert invalid(Cell(devices=3, restart="more")) is not None, "4 processes: not on 2 cores"
    native = Cell(loader="native", restart="more")
    shares = "each reading its own share of the stream"
    assert refusal(native) is None and refusal_at_restart(native, 2) == shares, "a mid-epoch state of shares"
    assert refusal_at_restart(native, 0) is None, "no checkpoint (killed before the first): a fresh start"
    assert refusal_at_restart(replace(native, interrupt="epoch_end"), 2) is None, "a state between epochs"
    assert invalid(Cell(strategy="fabric", even=False, restart="fewer", devices=3)) is not None, "warned"
    assert invalid(Cell(strategy="fabric", even=False, loader="worker_split", mode="dispatch")) is None
    assert refusal(Cell(loader="worker_split", mode="dispatch", even=False)) == (
        "`even_batches=False` with `dispatch_batches=True` over a stream without a length"
    )
    assert (
        refusal(Cell(loader="hf", feature="val_float")) == "`Trainer(val_check_interval)` must be time based"
    )
    assert refusal(Cell(loader="strided", feature="val_float")) is None, "a sized stream has a length"


def test_rules_of_the_sampler_axis() -> None:
    """A user's sampler goes in a map-style loader with a batch size; a batch sampler without one cannot
    be split; ``even_batches=False`` counts the sampler's own batches."""
    for loader in ("strided", "native", "unbatched", "sequential"):
        assert invalid(Cell(loader=loader, sampler="weighted")) is not None, loader
    for loader in ("shuffled", "seedable", "subclass"):
        assert invalid(Cell(loader=loader, sampler="bucketing")) is None, loader
    assert invalid(Cell(loader="unbatched")) is None, "`default`: the loader axis decides, as before"
    split = "`split_batches=True` needs the batch size of the"
    assert refusal(Cell(sampler="max_tokens", mode="split")) == split
    assert refusal(Cell(sampler="max_tokens", mode="dispatch")) is None, "dispatch joins whole batches"
    assert refusal(Cell(sampler="bucketing", mode="split")) is None, "a short batch is split exactly"
    # NOTE: 14 bucketing batches of 36 ids: 7 a process on 2, not an equal share on 3.
    assert refusal(Cell(sampler="bucketing", even=False)) is None
    assert (
        refusal(Cell(sampler="bucketing", even=False, devices=3, restart="fewer")) == "`even_batches=False`"
    )
    assert refusal(Cell(sampler="bucketing", even=False, restart="more")) == "`even_batches=False`"
    assert refusal(Cell(sampler="bucketing", even=False, devices=3, mode="split")) is None
    assert refusal(Cell(sampler="max_tokens", even=False)) == "`even_batches=False`", "13 batches"
    assert refusal(Cell(sampler="max_tokens", even=False, mode="dispatch")) == "`even_batches=False`"
    assert refusal(Cell(even=False, mode="dispatch")) is None, "12 batches, whole or split, on 2 and 3"
    assert refusal(Cell(even=False, mode="split", devices=3)) is None


def test_the_rest_of_an_uneven_epoch_resumed_on_another_count_is_refused_at_the_restart() -> None:
    """``even_batches=False``, 12 batches: 2 steps on 2 processes leave 8, which 3 cannot share evenly."""
    more = Cell(even=False, restart="more")
    assert refusal(more) is None, "the whole epoch divides among 2 and 3"
    assert refusal_at_restart(more, 2) == "`even_batches=False`"
    assert refusal_at_restart(more, 3) is None, "6 left: 2 each"
    assert refusal_at_restart(more, 6) is None, "the epoch's end: the next one begins whole"
    fewer = Cell(even=False, devices=3, restart="fewer")
    refused = [done for done in range(5) if refusal_at_restart(fewer, done)]
    assert refused == [1, 3], "of 4 steps on 3 processes: 9 or 3 left for 2"
    assert refusal_at_restart(replace(more, feature="limit"), 4) is None, "Lightning's epoch ended"
    assert refusal_at_restart(replace(more, mode="dispatch"), 2) == "`even_batches=False`", "whole batches"
    for other in (replace(more, mode="split"), replace(more, strategy="fabric"), replace(more, even=True)):
        assert refusal_at_restart(other, 2) is None, other.id


def test_the_bucketing_sampler_has_short_batches_mid_epoch_that_every_split_takes() -> None:
    """Each of its buckets but one ends in a short batch (so, shuffled, some come mid-epoch), in every
    mode; under ``split`` none is shorter than the processes (the library would raise there), and some
    do not divide among them (each process gets a part, the parts differing by one)."""
    for even in (True, False):
        for mode in ("shard", "split"):
            cell = Cell(sampler="bucketing", mode=mode, even=even)
            short = [size for size in epoch_batch_sizes(cell) if size != loader_batch(cell)]
            assert len(short) >= 2, (mode, even, short)
        assert any(size % 3 for size in epoch_batch_sizes(Cell(sampler="bucketing", mode="split", even=even)))
    for cell in matrix(MATRIX_SEED):
        assert not split_short(cell, max(cell.devices, cell.restart_devices)), cell.id


def test_every_own_sampler_yields_the_batches_the_rules_count() -> None:
    """The loaders of ``tests/scripts/matrix_fit.py``: ``len()`` and the batch sizes the rules assume;
    every id once per epoch, the even ones for ``filtering``, draws for ``weighted*``."""
    from tests.scripts.matrix_fit import train_loader

    for sampler in AXES["sampler"][1:]:
        for mode, even in (("shard", True), ("shard", False), ("split", True)):
            cell = Cell(sampler=sampler, mode=mode, even=even)
            loader = train_loader(cell, 0)
            batches = [batch.tolist() for batch in loader]
            assert len(loader) == len(batches), cell.id
            assert sorted(map(len, batches)) == sorted(epoch_batch_sizes(cell)), cell.id
            ids = [i for batch in batches for i in batch]
            if sampler not in REPLACEMENT:
                assert sorted(ids) == sorted(check.universe(cell)), cell.id
            assert set(ids) <= check.universe(cell), cell.id


def test_every_known_defect_shows_in_some_cell_of_the_matrix() -> None:
    cells = matrix(MATRIX_SEED)
    for number, what, shows in KNOWN_DEFECTS:
        assert any(shows(cell) for cell in cells), f"defect {number} ({what}) is in no cell"


# -- the verdict --------------------------------------------------------------------------------------------
def _records(per_rank: list[list[list[int]]], epoch: int = 0) -> check.Records:
    return [[{"epoch": epoch, "batch_idx": i, "a": ids} for i, ids in enumerate(rank)] for rank in per_rank]


def _epoch(shuffle: int) -> list[list[list[int]]]:
    """38 ids on 2 processes in batches of 3: 7 steps, the last padded with 4 ids of the epoch's head."""
    order = list(range(38))
    random.Random(shuffle).shuffle(order)
    padded = order + order[:4]
    batches = [padded[i : i + 3] for i in range(0, 42, 3)]
    return [batches[0::2], batches[1::2]]


def _two_epochs() -> check.Records:
    first, second = _records(_epoch(0), 0), _records(_epoch(1), 1)
    return [a + b for a, b in zip(first, second, strict=True)]


def _split(records: check.Records, at: int) -> tuple[check.Records, check.Records]:
    return [rank[:at] for rank in records], [rank[at:] for rank in records]


def test_the_verdict_passes_an_exact_restart() -> None:
    full = _two_epochs()
    prefix, after = _split(full, 4)
    assert check.data_problems(Cell(), full, prefix, after) == []


@pytest.mark.parametrize(
    ("damage", "found"),
    [
        ("drop", "never read"),
        ("repeat", "repeated reads"),
        ("reorder", "differs from the uninterrupted run"),
        ("same_order", "reads the same ids in every epoch"),
    ],
)
def test_the_verdict_finds_a_lost_a_repeated_and_a_reordered_sample(damage: str, found: str) -> None:
    full = _two_epochs()
    prefix, after = _split(full, 4)
    after = [[dict(record) for record in rank] for rank in after]
    if damage == "drop":
        after[0][0]["a"] = after[0][0]["a"][:2]
    elif damage == "repeat":
        after[0][0]["a"] = after[0][1]["a"][:] + after[0][1]["a"][:] + after[0][1]["a"][:]
    elif damage == "reorder":
        after[0][0], after[0][1] = after[0][1], after[0][0]
    else:
        full = [rank[:7] + [{**record, "epoch": 1} for record in rank[:7]] for rank in full]
        prefix, after = _split(full, 4)
    problems = check.data_problems(Cell(), full, prefix, after)
    assert any(found in problem for problem in problems), problems


def test_the_verdict_of_a_restart_on_another_count_checks_the_invariant() -> None:
    full = _two_epochs()
    prefix, _ = _split(full, 2)
    rest = sorted(set(range(38)) - {i for rank in prefix for r in rank for i in r["a"]})
    after_epoch0 = [[{"epoch": 0, "batch_idx": 2, "a": rest}]]  # one process: the rest of the epoch
    after = [after_epoch0[0] + [{"epoch": 1, "batch_idx": 0, "a": list(range(38))}]]
    cell = Cell(restart="fewer")
    assert check.data_problems(cell, full, prefix, after) == []
    after[0][0]["a"] = rest[1:]
    assert any("1 ids never read" in problem for problem in check.data_problems(cell, full, prefix, after))


def _draws(seed: int, epoch: int) -> list[list[int]]:
    """A weighted sampler's 38 draws (ids repeated) on 2 processes in batches of 3, padded as ``_epoch``."""
    draws = random.Random(seed).choices(range(38), k=38)
    padded = draws + draws[:4]
    batches = [padded[i : i + 3] for i in range(0, 42, 3)]
    return [batches[0::2], batches[1::2]]


def test_the_verdict_of_a_sampler_with_replacement_compares_the_draws() -> None:
    """Ids repeat by design; the killed and restarted run must draw what the uninterrupted one drew, on the
    same number of processes rank by rank, on another in the order of the global batches."""
    full = [a + b for a, b in zip(_records(_draws(0, 0), 0), _records(_draws(1, 1), 1), strict=True)]
    prefix, after = _split(full, 4)
    same = Cell(sampler="weighted")
    assert check.data_problems(same, full, prefix, after) == []
    # NOTE: on one process, the rest of epoch 0 (global batches 8 to 12, then one of padding) and epoch 1.
    rest = [batch for step in zip(*_draws(0, 0), strict=True) for batch in step][8:]
    whole = [batch for step in zip(*_draws(1, 1), strict=True) for batch in step]
    one = [_records([rest], 0)[0] + _records([whole], 1)[0]]
    fewer = replace(same, restart="fewer")
    assert check.data_problems(fewer, full, prefix, one) == []
    one[0][0]["a"] = [(one[0][0]["a"][0] + 1) % 38, *one[0][0]["a"][1:]]
    problems = check.data_problems(fewer, full, prefix, one)
    assert any("epoch 0: the draws differ from the uninterrupted run's at draw 24" in p for p in problems)


def test_the_verdict_finds_an_id_a_filtering_sampler_never_yields() -> None:
    """``filtering`` yields the even ids: an odd one read means the user's sampler was replaced."""
    evens = [i for i in range(38) if i % 2 == 0]
    batches = [evens[i : i + 3] for i in range(0, 18, 3)] + [[36, 0, 2], [4, 6, 8]]
    full = _records([batches[0::2], batches[1::2]])
    prefix, after = _split(full, 2)
    cell = Cell(sampler="filtering")
    assert check.data_problems(cell, full, prefix, after) == []
    after[0][0]["a"] = [1, *after[0][0]["a"][1:]]
    problems = check.data_problems(cell, full, prefix, after)
    assert any("1 ids the sampler never yields: [1]" in problem for problem in problems), problems


def test_an_epoch_read_in_part_that_reaches_its_end_may_hold_the_padding() -> None:
    """19 even ids on 2 processes: 4 steps, the last padded; ``limit_train_batches=4`` reads all of them."""
    evens = [i for i in range(38) if i % 2 == 0]
    batches = [evens[i : i + 3] for i in range(0, 19, 3)] + [[0, 2, 4]]
    batches[6] = [36, 0, 2]
    full = _records([batches[0::2], batches[1::2]])
    prefix, after = _split(full, 2)
    limited = Cell(sampler="filtering", feature="limit")
    assert check.data_problems(limited, full, prefix, after) == []
    cut = [rank[:3] for rank in full]
    assert check.data_problems(limited, cut, [rank[:2] for rank in cut], [rank[2:] for rank in cut]) == []
    cut[1][0] = {**cut[1][0], "a": cut[0][0]["a"]}
    problems = check.data_problems(limited, cut, [rank[:2] for rank in cut], [rank[2:] for rank in cut])
    assert any("ids read twice in an epoch read in part" in problem for problem in problems), problems


# -- the launcher's watchdog --------------------------------------------------------------------------------
def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_a_launch_that_keeps_printing_outlives_the_bound() -> None:
    """The bound (1 s) is shorter than the run (about 3 s): each new line restarts it."""
    code = """
        import time
        for step in range(12):
            print("step", step, flush=True)
            time.sleep(0.25)  # NOTE: a slow run, not synchronisation
    """
    returncode, output = finish(_python(code), timeout=1.0)
    assert returncode == 0 and output.count("step") == 12


def _ends(pid: int, within: float = 30.0) -> bool:
    """Whether process ``pid`` has ended or ends within ``within`` seconds (a pidfd turns readable at its exit)."""
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([descriptor], [], [], within)[0])
    finally:
        os.close(descriptor)


def test_a_silent_launch_is_killed_with_what_it_started_in_another_session(tmp_path: Path) -> None:
    """The launch starts a process in a session of its own (out of reach of ``killpg``), then hangs."""
    pid_file = tmp_path / "pid"
    code = f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(600)
    """
    with pytest.raises(pytest.fail.Exception, match="hung: no output for 2.0s"):
        finish(_python(code), timeout=2.0)
    escaped = int(pid_file.read_text())
    assert _ends(escaped), "the process in its own session was killed too"
