"""Real 2-GPU ``lightning.Trainer`` fits for ``tests/cuda/test_gpu.py`` (``make gpu-check``), one kind per call:

    python -m tests.scripts.gpu_fits KIND OUT_DIR   (from the repository root)

``ddp``: ``ShardStrategy`` whose loaders put batches on the GPU themselves (``put_on_device``,
``non_blocking`` with ``pin_memory=True``); ``dispatch``: ``ShardStrategy(dispatch_batches=True)``, rank 0
loading and sending over NCCL; ``fsdp_full`` / ``fsdp_sharded``: ``ShardFSDPStrategy`` with either
``state_dict_type``. Each kind runs an uninterrupted 2-epoch fit (``full``, audited), a fit stopped at
step 3 by a checkpoint (``stop``) and its resume (``resume``); every process records the ids of each
step, the device of its batches, the learning rates, the gathered validation ids and its weights.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor

from lightning_shard import ShardFSDPStrategy, ShardStrategy
from tests.helpers.lightning_app import Recorder, loader, trainer

TRAIN, VAL, BATCH, STOP_AT = 22, 13, 2, 3
"""22 samples, 2 per process and step on 2 GPUs: 6 steps per epoch, the last padded with 2."""


class GpuRecorder(Recorder):
    """``Recorder`` that also records where each training batch is, and its weights at the end."""

    def __init__(self, out_dir: str) -> None:
        super().__init__(out_dir, scheduler="lambda")
        self.records["devices"] = []

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        self.records["devices"].append(str(batch["x"].device))
        return super().training_step(batch, batch_idx)

    def on_fit_end(self) -> None:
        self.records["weights"] = [float(p.detach().double().sum()) for p in self.parameters()]
        self.records["audits"] = [audit.summary() for audit in getattr(self.trainer.strategy, "audits", [])]
        super().on_fit_end()


def strategy(kind: str, audit: bool = False) -> Any:
    if kind == "ddp":
        return ShardStrategy(put_on_device=True, non_blocking=True, audit=audit)
    if kind == "dispatch":
        return ShardStrategy(dispatch_batches=True, put_on_device=True, audit=audit)
    return ShardFSDPStrategy(state_dict_type=kind.removeprefix("fsdp_"), audit=audit)


def fit(out: Path, kind: str, ckpt_path: str | None = None, audit: bool = False, **kwargs: Any) -> None:
    pl.seed_everything(0)
    train = loader(TRAIN, BATCH, shuffle=True, pin_memory=True)
    fitting = trainer(out, strategy=strategy(kind, audit), devices=2, accelerator="cuda", **kwargs)
    fitting.fit(GpuRecorder(str(out)), train, loader(VAL, BATCH), ckpt_path=ckpt_path)


def main(kind: str, out: Path) -> None:
    for name in ("full", "stop", "resume"):
        (out / name).mkdir(parents=True, exist_ok=True)
    fit(out / "full", kind, audit=True, max_epochs=2)
    save = ModelCheckpoint(out / "checkpoints", every_n_train_steps=STOP_AT, save_top_k=-1, filename="{step}")
    fit(out / "stop", kind, max_steps=STOP_AT, callbacks=[save], enable_checkpointing=True)
    (checkpoint,) = (out / "checkpoints").glob("*.ckpt")
    fit(out / "resume", kind, ckpt_path=str(checkpoint), max_epochs=2)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
