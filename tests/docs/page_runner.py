"""Runs one documentation page's examples with the Python that runs this file: a fresh virtual
environment's (``tests/docs/environments.py``), started in the page's own directory outside the repository.

    python page_runner.py STEPS.json OUTPUTS.json

``STEPS.json`` holds ``{"page": path, "name": module name, "steps": [...]}``, each step an untitled block
(``{"code": ..., "line": n}``: run in the page's one namespace, in this process) or a titled file
(``{"file": "train.py"}``: run as ``python train.py`` in its own process), in the page's order
(``tests/docs/blocks.py``). ``OUTPUTS.json`` receives what each printed: ``{"": the untitled blocks',
"train.py": the file's, ...}``; everything is echoed to this process's output as it comes, so the test's
bound (no output for so long) ends only a hang. A failing block or file fails the run.

NOTE: only the standard library: nothing of the checkout is imported, so the page sees the environment
alone (the test copies this file into the page's directory and runs it from there).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any


class _Tee(io.TextIOBase):
    """Writes what the blocks print both to this process's output and to a buffer."""

    def __init__(self, out: Any) -> None:
        self.out, self.buffer = out, io.StringIO()

    def write(self, text: str) -> int:
        self.out.write(text)
        self.out.flush()
        return self.buffer.write(text)


def run_file(name: str) -> str:
    """``python NAME`` in this directory, echoed line by line; its output (a failure exits)."""
    process = subprocess.Popen(
        [sys.executable, name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    if process.wait() != 0:
        sys.exit(f"`python {name}` failed ({process.returncode})")
    return "".join(lines)


def main() -> None:
    spec, outputs_path = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    namespace: dict[str, object] = {"__name__": spec["name"]}
    printed = _Tee(sys.stdout)
    outputs: dict[str, str] = {}
    for step in spec["steps"]:
        if "file" in step:
            outputs[step["file"]] = run_file(step["file"])
            continue
        # NOTE: padded with blank lines so that a traceback names the page's own line.
        code = compile("\n" * step["line"] + step["code"], spec["page"], "exec")
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)  # noqa: S102 - the page's own example
    outputs[""] = printed.buffer.getvalue()
    outputs_path.write_text(json.dumps(outputs))


if __name__ == "__main__":
    main()
