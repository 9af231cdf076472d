"""The summary of a full matrix run (``make test-matrix``), as recorded in ``benchmarks/RELIABILITY.md``:

python -m tests.matrix.summary MATRIX_OUT   (from the repository root)
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def summary(out: Path) -> str:
    verdicts = [json.loads(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
    counts = Counter(verdict["outcome"] for verdict in verdicts)
    known = [verdict for verdict in verdicts if verdict["known_defect"] is not None]
    lines = [
        f"{len(verdicts)} cells run: {counts['passed']} passed, {counts['refused']} refused as the rules say, "
        f"{counts['failed']} failed ({sum(v['outcome'] == 'failed' for v in known)} of them known defects, strict xfail)",
        "",
    ]
    for verdict in verdicts:
        if verdict["outcome"] == "failed" or verdict["known_defect"] is not None:
            tag = f"known defect {verdict['known_defect']}" if verdict["known_defect"] else "NEW"
            first = verdict["problems"][0][:300].replace("\n", " ") if verdict["problems"] else "(passed)"
            lines.append(f"- `{verdict['cell']}` ({verdict['outcome']}, {tag}): {first}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
