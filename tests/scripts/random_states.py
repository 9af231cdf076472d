"""Fits whose every step draws from each of the global generators, for
``tests/lightning/test_random_states.py``:

    python -m tests.scripts.random_states N OUT_DIR [--compat CKPT] [--elastic CKPT]   (from the repository root)

On ``N`` processes (``ShardStrategy``, CPU): ``full``, an uninterrupted fit of 2 epochs with dropout,
augmentation in the main process and a draw from NumPy's and Python's global generators in every step,
checkpointing after ``STOP`` steps (mid-epoch 0), and in ``latest/`` every 2 steps keeping the last
(``save_top_k=1``, ``save_last="link"``); then ``resume``, that checkpoint resumed after seeding
otherwise. ``--compat CKPT`` adds ``compat``, a fit resumed from ``CKPT``, a checkpoint in the format of
lightning_shard 0.3.0 (every process's random states gathered in process 0's checkpoint);
``--elastic CKPT`` adds ``elastic``, a fit resumed from ``CKPT`` written by another number of processes.
Each fit writes per process the ids of every step, a digest of the random states at the start of each
step and its final weights.
"""

from __future__ import annotations

import argparse
import hashlib
import random
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard.comm.random_states import capture
from tests.helpers.lightning_app import trainer
from tests.scripts.own_sampler import Dropout, augmented_loader

STOP = 3
"""Steps after which the uninterrupted fit checkpoints: mid-epoch 0 on 1, 2 and 3 processes."""


def states_digest(state: dict[str, Any]) -> str:
    """A digest of random states in ``capture()``'s format: equal digests, equal states."""
    digest = hashlib.sha256()
    _update(digest, state)
    return digest.hexdigest()


def _update(digest: Any, value: Any) -> None:
    if isinstance(value, dict):
        for key in sorted(value):
            digest.update(repr(key).encode())
            _update(digest, value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            _update(digest, item)
    elif isinstance(value, Tensor):
        digest.update(str(value.dtype).encode() + value.cpu().contiguous().numpy().tobytes())
    else:
        digest.update(repr(value).encode())


class Drawing(Dropout):
    """``Dropout`` whose loss is scaled by a draw from NumPy's and from Python's global generator; it
    records a digest of the random states at the start of every step (after any restore)."""

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        self.records.setdefault("states", []).append(states_digest(capture()))
        loss = super().training_step(batch, batch_idx)
        return loss * (1.0 + 0.01 * (float(np.random.rand()) + random.random()))


def _fit(out: Path, name: str, devices: int, seed: int, ckpt_path: str | None, **kwargs: Any) -> None:
    run = out / name
    run.mkdir(parents=True, exist_ok=True)
    pl.seed_everything(seed)
    fitting = trainer(run, devices=devices, max_epochs=2, **kwargs)
    fitting.fit(Drawing(str(run)), augmented_loader(), ckpt_path=ckpt_path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("devices", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("--compat")
    parser.add_argument("--elastic")
    args = parser.parse_args()
    checkpoints = args.out / "checkpoints"
    save = ModelCheckpoint(checkpoints, every_n_train_steps=STOP, save_top_k=-1, filename="{step}")
    # NOTE: keeps one checkpoint and a link to it: the older ones are removed with their random states.
    latest = ModelCheckpoint(args.out / "latest", every_n_train_steps=2, save_last="link", filename="{step}")
    _fit(args.out, "full", args.devices, 0, None, callbacks=[save, latest], enable_checkpointing=True)
    # NOTE: seeded otherwise: nothing but the checkpoint may carry the random streams.
    _fit(args.out, "resume", args.devices, 1, str(checkpoints / f"step={STOP}.ckpt"))
    if args.compat:
        _fit(args.out, "compat", args.devices, 1, args.compat)
    if args.elastic:
        _fit(args.out, "elastic", args.devices, 1, args.elastic)


if __name__ == "__main__":
    main()
