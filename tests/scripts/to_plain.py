"""A checkpoint written under ``ShardStrategy`` on 2 processes, mid-epoch, for
``tests/lightning/test_to_plain.py`` to convert and resume under plain Lightning (``plain_fit.py``):

    python -m tests.scripts.to_plain OUT_DIR   (from the repository root)

Writes ``OUT_DIR/checkpoints/step=3.ckpt`` (audited, so that every callback state of ours is in it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_shard import ShardStrategy
from tests.helpers.lightning_app import Recorder, loader, trainer

LENGTH, BATCH, STOP_AT = 50, 4, 3


def save(out: Path) -> None:
    (out / "save").mkdir(parents=True, exist_ok=True)
    checkpoints = ModelCheckpoint(out / "checkpoints", every_n_train_steps=STOP_AT, filename="{step}")
    pl.seed_everything(0)
    fit = trainer(
        out / "save",
        ShardStrategy(audit=True),
        2,
        max_steps=STOP_AT,
        callbacks=[checkpoints],
        enable_checkpointing=True,
    )
    fit.fit(Recorder(str(out / "save"), scheduler="lambda"), loader(LENGTH, BATCH, shuffle=True))


if __name__ == "__main__":
    save(Path(sys.argv[1]))
