"""One small finished 2-process fit, for ``tests/lightning/test_exit_status.py``: its processes must exit 0.

    python -m tests.scripts.exit_status KIND OUT_DIR   (from the repository root)

``KIND``: ``map`` (a shuffled map-style dataset), ``stream`` (a strided stream with ``even_batches=False``:
an asynchronous end agreement runs at every fetch), ``dispatch`` (process 0 sends every batch with
asynchronous sends). Lightning's process group stays up at the end of the fit, as it does for users.
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch.utils.data import DataLoader

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard import ShardStrategy
from tests.helpers.lightning_app import Recorder, SizedRecordStream, loader, trainer

LENGTH, BATCH = 26, 2


def main(kind: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    strategies = {
        "map": ShardStrategy(),
        "stream": ShardStrategy(even_batches=False),
        "dispatch": ShardStrategy(dispatch_batches=True, put_on_device=True),
    }
    data = (
        loader(LENGTH, BATCH, shuffle=True)
        if kind == "map"
        else DataLoader(SizedRecordStream(LENGTH), batch_size=BATCH)
    )
    fit = trainer(out, strategies[kind], 2, max_epochs=2, limit_train_batches=5)
    fit.fit(Recorder(str(out)), data)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
