"""A checkpoint resumed by plain Lightning (``Trainer(strategy="ddp")``, 2 processes) in a process where
``lightning_shard`` cannot be imported, for ``tests/lightning/test_to_plain.py``:

    python -m tests.scripts.plain_fit CHECKPOINT OUT_DIR   (from the repository root)

A fit that fails writes Lightning's message to ``OUT_DIR/error_rank{R}.txt``; one that runs writes each
process's records (``Recorder``) and, in ``OUT_DIR/end_rank{R}.json``, the weights it started from and
ended with and the ``lightning_shard`` modules loaded (none).
"""

from __future__ import annotations

import sys

# NOTE: before anything else, in this process and in the ranks Lightning starts (they run this script
# again): a `None` entry makes `import lightning_shard` raise `ModuleNotFoundError`, as if it were not
# installed (the shared environment has it installed, editable).
sys.modules["lightning_shard"] = None  # type: ignore[assignment]

import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import lightning.pytorch as pl  # noqa: E402

from tests.helpers.lightning_app import Recorder, loader, trainer  # noqa: E402

LENGTH, BATCH = 50, 4


class _Plain(Recorder):
    """``Recorder`` that also notes the weights the fit starts from."""

    def on_train_start(self) -> None:
        self.records["start_weight"] = [self.layer.weight.flatten().tolist()]


def main(checkpoint: str, out: Path) -> None:
    rank = os.environ.get("LOCAL_RANK", "0")
    try:
        import lightning_shard  # noqa: F401

        raise AssertionError("lightning_shard is importable in the plain-Lightning process")
    except ModuleNotFoundError:
        pass
    out.mkdir(parents=True, exist_ok=True)
    pl.seed_everything(1)
    module = _Plain(str(out), scheduler="lambda")
    fit = trainer(out, "ddp", 2, max_epochs=2)
    try:
        fit.fit(module, loader(LENGTH, BATCH, shuffle=True), ckpt_path=checkpoint)
    except RuntimeError as error:
        (out / f"error_rank{rank}.txt").write_text(str(error))
        return
    end: dict[str, Any] = {
        "global_step": fit.global_step,
        "start_weight": module.records["start_weight"][0],
        "end_weight": module.layer.weight.flatten().tolist(),
        "ours": sorted(
            name for name, value in sys.modules.items() if name.startswith("lightning_shard") and value
        ),
    }
    (out / f"end_rank{rank}.json").write_text(json.dumps(end))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
