"""``scalable_shuffle`` under Lightning, for ``tests/lightning/test_scalable_fit.py``, one phase per call:

    python -m tests.scripts.scalable PHASE OUT_DIR   (from the repository root)

``two`` (2 processes): a shuffled fit with ``ShardStrategy(scalable_shuffle=True)`` stopped mid-epoch and
checkpointed, then resumed on 2 processes. ``one`` (1 process): the same checkpoint resumed on 1. Each fit
records what every process trained on; the global seed differs in every fit, so only ``data_seed`` and
the checkpoint can carry the order.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard import ShardStrategy
from tests.helpers.lightning_app import Recorder, loader, trainer

LENGTH, BATCH, STOP_AT, DATA_SEED = 50, 4, 3, 11


def _fit(run: Path, devices: int, seed: int, **settings: object) -> pl.Trainer:
    run.mkdir(parents=True, exist_ok=True)
    pl.seed_everything(seed)
    return trainer(run, ShardStrategy(scalable_shuffle=True, data_seed=DATA_SEED), devices, **settings)


def two(out: Path) -> None:
    save = ModelCheckpoint(out / "checkpoints", every_n_train_steps=STOP_AT, filename="{step}")
    stopped = _fit(out / "stop2", 2, 0, max_steps=STOP_AT, callbacks=[save], enable_checkpointing=True)
    stopped.fit(Recorder(str(out / "stop2")), loader(LENGTH, BATCH, shuffle=True))
    _resume(out, 2)


def one(out: Path) -> None:
    _resume(out, 1)


def _resume(out: Path, devices: int) -> None:
    (checkpoint,) = (out / "checkpoints").glob("*.ckpt")
    run = out / f"resume2to{devices}"
    fit = _fit(run, devices, 100 + devices, max_epochs=2)
    fit.fit(Recorder(str(run)), loader(LENGTH, BATCH, shuffle=True), ckpt_path=str(checkpoint))


PHASES = {function.__name__: function for function in (one, two)}

if __name__ == "__main__":
    PHASES[sys.argv[1]](Path(sys.argv[2]))
