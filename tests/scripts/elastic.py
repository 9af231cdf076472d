"""One worker of an elastic ``torchrun`` fit (see ``tests/lightning/test_elastic.py``):

python -m torch.distributed.run --nnodes=1:3 --rdzv-backend=c10d ... -m tests.scripts.elastic OUT

Every attempt (each start of the worker group: the first, and each restart after a failure or a change of
membership) resumes from ``OUT/checkpoints/last.ckpt`` when there is one, and appends each training step
it takes to ``OUT/steps-<pid>.jsonl``: ``[attempt, start_step, rank, world, epoch, global_step, ids]``,
``start_step`` being the global step its checkpoint restored (the consistent point). ``attempt`` orders
the attempts (rank 0's monotonic clock at the start of the fit, the same on every rank).

The first attempt on two processes holds at global step ``HOLD_AT``, after that step's checkpoint is written:
every rank writes ``OUT/held-<rank>`` (its pid), then waits, without training further, until the test has
changed the group (killed an agent, a worker, or started another agent) and either ``OUT/go`` appears
(then it continues, into a peer that may be gone) or its agent stops it (SIGTERM: it exits at once).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor

from lightning_shard import ShardStrategy
from tests.helpers.lightning_app import Recorder, loader

HOLD_AT = 3
"""The global step after which the first attempt on two processes holds: mid-epoch 0 (5 steps of 4 samples)."""
LENGTH = 20
BATCH = 2
EPOCHS = 2
HOLD_WORLD = 2
"""The test acts once the group of two agents it starts holds."""
HOLD_BOUND = 300.0
"""Seconds a held rank waits for the test at most: the test acts within seconds of the last rank holding;
this only ends a worker whose test has gone."""


class ElasticRecorder(Recorder):
    """Writes every training step as it ends, so a killed attempt leaves what it consumed behind."""

    def __init__(self, out_dir: str, hold_at: int) -> None:
        super().__init__(out_dir)
        self.hold_at = hold_at
        self.attempt: int | None = None
        self.start_step = 0
        self.path = Path(out_dir) / f"steps-{os.getpid()}.jsonl"

    def on_train_start(self) -> None:
        self.start_step = self.trainer.global_step
        self.attempt = int(self.trainer.strategy.broadcast(time.monotonic_ns()))

    def on_train_batch_end(self, outputs: Any, batch: dict[str, Tensor], batch_idx: int) -> None:
        trainer = self.trainer
        ids = torch.as_tensor(batch["id"]).reshape(-1).tolist()
        entry = [self.attempt, self.start_step, trainer.global_rank, trainer.world_size]
        with self.path.open("a") as steps:
            steps.write(json.dumps([*entry, self.current_epoch, trainer.global_step, ids]) + "\n")
        # NOTE: the module's hook runs after the callbacks': the checkpoint of this step is written.
        if self._holds(trainer):
            self._hold()

    def _holds(self, trainer: pl.Trainer) -> bool:
        """Once, in the first attempt on ``HOLD_WORLD`` processes that reaches ``hold_at`` (the first round
        of the rendezvous may close before every agent joined: the group then restarts to take it in)."""
        held = (Path(self.out_dir) / f"held-{trainer.global_rank}").exists()
        return (
            bool(self.hold_at)
            and trainer.world_size == HOLD_WORLD
            and trainer.global_step >= self.hold_at
            and not held
        )

    def _hold(self) -> None:
        out = Path(self.out_dir)
        (out / f"held-{self.trainer.global_rank}").write_text(str(os.getpid()))
        # NOTE: the agent stops its workers with SIGTERM to restart the group; Lightning's own handler would
        # broadcast to the other ranks, which may be gone. Nothing of this attempt is kept anyway.
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(143))
        deadline = time.monotonic() + HOLD_BOUND
        while not (out / "go").exists():
            if time.monotonic() > deadline:
                sys.exit(f"held for {HOLD_BOUND}s without the test acting")
            time.sleep(0.05)  # NOTE: polling for the test's signal, not waiting for time to pass
        signal.signal(signal.SIGTERM, previous)

    def on_fit_end(self) -> None:
        pass


def main() -> None:
    out_dir = sys.argv[1]
    world, local = int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_WORLD_SIZE"])
    checkpoints = Path(out_dir) / "checkpoints"
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=local,
        num_nodes=world // local,
        strategy=ShardStrategy(use_seedable_sampler=True, data_seed=0),
        max_epochs=EPOCHS,
        callbacks=[ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=1, save_last=True)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = ElasticRecorder(out_dir, HOLD_AT)
    trainer.fit(model, loader(LENGTH, BATCH, shuffle=True), ckpt_path="last")
    print(f"rank {trainer.global_rank} of {trainer.world_size}: fit done", flush=True)


if __name__ == "__main__":
    main()
