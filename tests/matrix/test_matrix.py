"""The combination matrix (docs/DESIGN.md, "Combination harness"): real 2- and 3-process fits, each cell
checked against its own uninterrupted run by the ids every rank consumed (``tests/matrix/check.py``).

``make test`` runs a seeded sample of the matrix's cheap cells (forked ranks: ``ShardStrategy`` and
``ShardFabricStrategy``), a different sample each day; the seed is printed and in every failure, and a
failing run reproduces with::

    MATRIX_SEED=20261130 python -m pytest -q tests/matrix        # the same sample
    MATRIX_CELLS="strategy=ddp-loader=...,..." python -m pytest -q tests/matrix   # given cells (ids, comma-separated)

``make test-matrix`` runs every cell (``MATRIX_ALL=1``, ``ShardModelParallelStrategy`` included) and
writes the summary recorded in ``benchmarks/RELIABILITY.md`` (``MATRIX_OUT``: where the records stay).

A cell of a defect not fixed yet is listed in ``KNOWN_DEFECTS`` and runs as a strict ``xfail``: once
the defect is fixed the cell passes, the strict ``xfail`` fails, and its row is deleted.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.runner import finish, script
from tests.matrix.cells import (
    EXIT_AFTER,
    SHARED_STREAMS,
    Cell,
    matrix,
    sample,
)

pytestmark = pytest.mark.lightning

IDLE_BOUND = 300.0
"""Seconds a launch may print nothing before it counts as hung and is killed: every fit prints a few
lines and every cell a verdict line, so only a hang is that quiet, even on 2 shared, loaded cores."""
SAMPLE = 8
"""Cells of the daily sample: about a minute on 2 idle cores (about 4 s a cell plus one start-up)."""
SAMPLE_OWN_SAMPLERS = 3
"""Of them, at least this many with a sampler of the user's own (the ``sampler`` axis): the axis is
about a third of the matrix's cells, so a sample of 8 would otherwise miss it some days."""
PER_LAUNCH = 12
"""Cells per launch of ``tests/scripts/matrix_fit.py`` (``MATRIX_ALL``): a hang loses at most these."""
MATRIX_SEED = 0
"""The seed of the matrix itself (which cells cover the pairs); the daily seed picks the sample."""

KNOWN_DEFECTS: list[tuple[int, str, Callable[[Cell], bool]]] = [
    (
        10,
        "Lightning's, also under its own `DDPStrategy`: a checkpoint written on the last batch before "
        "`on_train_batch_start` returns -1 in the last epoch resumes with `batch_idx` one behind, so the "
        "resumed fit trains one more batch (the loader's position is right: it is a new batch). It shows where "
        "the restart is compared batch by batch (as many processes), or where the position it resumes mid-epoch "
        "is refused (a stream's shares on another number); elsewhere the epoch is read in part, and a batch "
        "more of samples not yet read holds its invariant",
        lambda c: (
            c.strategy != "fabric"
            and c.feature == "early_exit"
            and c.interrupt == "epoch_end"
            and c.kill_at > EXIT_AFTER
            and (c.restart == "same" or c.loader in SHARED_STREAMS)
        ),
    ),
]
"""Defects not fixed yet: ``(defect, what, which cells show it)``. 1-4 (issue 17's) and 7-9, 11-13 (found
by this harness) and 15 (found by the sampler axis) are fixed; 10 is Lightning's own; 14 was the harness's
own expectation (a state saved after a Fabric loop's ``break`` continues the epoch left, as torchdata's
does, so such a loop saves inside the loop: docs/guides/parallel.md). Delete a row when its fix is merged
(its cells then pass; a strict ``xfail`` that passes fails the suite)."""


def known_defect(cell: Cell) -> tuple[int, str] | None:
    return next(((number, what) for number, what, shows in KNOWN_DEFECTS if shows(cell)), None)


def _seed() -> int:
    default = int(datetime.date.today().strftime("%Y%m%d"))
    return int(os.environ.get("MATRIX_SEED", default))


def selected() -> list[Cell]:
    """The cells this session runs: ``MATRIX_CELLS``, else all (``MATRIX_ALL``), else the day's sample."""
    if os.environ.get("MATRIX_CELLS"):
        return [
            Cell.parse(text)
            for text in os.environ["MATRIX_CELLS"].replace("\n", ",").split(",")
            if text.strip()
        ]
    cells = matrix(MATRIX_SEED)
    if os.environ.get("MATRIX_ALL"):
        return cells
    cheap = [cell for cell in cells if cell.strategy != "model_parallel"]
    return sample(cheap, _seed(), SAMPLE, own_samplers=SAMPLE_OWN_SAMPLERS)


CELLS = selected()
REPRODUCE = (
    f"matrix seed {_seed()} ({'MATRIX_CELLS' if os.environ.get('MATRIX_CELLS') else 'MATRIX_ALL' if os.environ.get('MATRIX_ALL') else 'the daily sample'}): "
    f"reproduce with MATRIX_SEED={_seed()}, or one cell with MATRIX_CELLS=<its id>"
)


def _chunks(cells: list[Cell]) -> list[list[Cell]]:
    return [cells[i : i + PER_LAUNCH] for i in range(0, len(cells), PER_LAUNCH)]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every selected cell run, a launch per ``PER_LAUNCH`` cells; the verdicts by cell id."""
    print(REPRODUCE)
    out = (
        Path(os.environ["MATRIX_OUT"]) if os.environ.get("MATRIX_OUT") else tmp_path_factory.mktemp("matrix")
    )
    found: dict[str, dict[str, Any]] = {}
    for index, chunk in enumerate(_chunks(CELLS)):
        run = out / f"launch{index}"
        try:
            code, output = finish(script("matrix_fit", str(run), *(cell.id for cell in chunk)), IDLE_BOUND)
        except (
            pytest.fail.Exception
        ) as hung:  # NOTE: killed; the chunk's other cells fail, the rest still run
            code, output = -1, str(hung)
        results = run / "results.jsonl"
        lines = results.read_text().splitlines() if results.exists() else []
        found.update({verdict["cell"]: verdict for verdict in map(json.loads, lines)})
        for cell in chunk:
            found.setdefault(
                cell.id,
                {
                    "cell": cell.id,
                    "outcome": "failed",
                    "problems": [f"no verdict: launch exited {code}:\n{output[-4000:]}"],
                },
            )
    with open(out / "verdicts.jsonl", "w") as file:
        file.writelines(
            json.dumps({**verdict, "known_defect": _defect_number(Cell.parse(cell))}) + "\n"
            for cell, verdict in found.items()
        )
    return found


def _defect_number(cell: Cell) -> int | None:
    defect = known_defect(cell)
    return None if defect is None else defect[0]


@pytest.mark.parametrize(
    "cell", CELLS, ids=[f"{i}-{c.strategy}-{c.loader}-{c.sampler}-{c.feature}" for i, c in enumerate(CELLS)]
)
def test_cell_reads_what_its_uninterrupted_run_reads(
    cell: Cell, verdicts: dict[str, dict[str, Any]], request: pytest.FixtureRequest
) -> None:
    """The cell passes, or is refused at set-up with its rule's message on every rank."""
    defect = known_defect(cell)
    if defect is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"known defect {defect[0]}: {defect[1]}"))
    verdict = verdicts[cell.id]
    problems = "\n".join(f"  - {problem}" for problem in verdict["problems"])
    assert verdict["outcome"] in ("passed", "refused"), f"{cell.id}\n{REPRODUCE}\n{problems}"
