"""The summary of a full matrix run (``make test-matrix``), as recorded in ``benchmarks/RELIABILITY.md``:

    python -m tests.matrix.summary MATRIX_OUT   (from the repository root)

Each failed cell is matched against the current ``KNOWN_DEFECTS`` table; a failure no row explains is
``NEW``, and a row's cell that passed is listed too (its strict ``xfail`` fails the suite); one line
counts the outcomes per value of the ``sampler`` axis.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tests.matrix.cells import Cell
from tests.matrix.test_matrix import known_defect


def _line(verdict: dict[str, Any], defect: int | None) -> str:
    tag = f"known defect {defect}" if defect is not None else "NEW"
    first = verdict["problems"][0][:240].replace("\n", " ") if verdict["problems"] else "passed"
    return f"- `{verdict['cell']}` ({verdict['outcome']}, {tag}): {first}"


def _by_sampler(verdicts: list[dict[str, Any]]) -> str:
    """One line: the outcomes of the cells of each value of the ``sampler`` axis."""
    outcomes: dict[str, Counter[str]] = {}
    for verdict in verdicts:
        outcomes.setdefault(Cell.parse(verdict["cell"]).sampler, Counter())[verdict["outcome"]] += 1
    parts = [
        f"{sampler} {sum(counts.values())} ({', '.join(f'{n} {o}' for o, n in sorted(counts.items()))})"
        for sampler, counts in sorted(outcomes.items())
    ]
    return "By sampler: " + "; ".join(parts) + "."


def summary(out: Path) -> str:
    verdicts = [json.loads(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
    defects = {v["cell"]: (known_defect(Cell.parse(v["cell"])) or (None,))[0] for v in verdicts}
    counts = Counter(verdict["outcome"] for verdict in verdicts)
    failed = [v for v in verdicts if v["outcome"] == "failed"]
    known = Counter(defects[v["cell"]] for v in failed if defects[v["cell"]] is not None)
    new = [v for v in failed if defects[v["cell"]] is None]
    passing_rows = [v for v in verdicts if v["outcome"] != "failed" and defects[v["cell"]] is not None]
    lines = [
        f"{len(verdicts)} cells run: {counts['passed']} passed, {counts['refused']} refused as the rules say, "
        f"{len(failed)} failed: {sum(known.values())} by known defects "
        f"({', '.join(f'{d}: {n}' for d, n in sorted(known.items()))}), {len(new)} not explained "
        f"by the table; {len(passing_rows)} cells the table lists passed.",
        "",
        _by_sampler(verdicts),
        "",
    ]
    lines += [_line(v, defects[v["cell"]]) for v in failed + passing_rows]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
