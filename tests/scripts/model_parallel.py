"""Real 4-process ``ShardModelParallelStrategy`` fits (data parallel 2 x tensor parallel 2) on CPU (gloo),
for ``tests/lightning/test_model_parallel.py``, all in one run (start-up is the expensive part):

    python -m tests.scripts.model_parallel OUT_DIR   (from the repository root)

``full``: 2 epochs, shuffled, a per-step scheduler, the audit, gathered validation, a ``ShardDataModule``
that records its sizes. ``stop_dcp`` stops at step 3 with a distributed checkpoint (a directory) that
``resume_dcp`` resumes; ``stop_file`` / ``resume_file`` the same with ``save_distributed_checkpoint=False``
(one file). ``dispatch``: one epoch with ``dispatch_batches=True``. The model is tensor-parallel
(``parallelize_module``) and FSDP2-sharded (``fully_shard``) in ``configure_model``; each process
records the ids of each step, the learning rates, the gathered validation ids and its weights.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor, nn
from torch.utils.data import DataLoader

from lightning_shard import ShardDataModule, ShardModelParallelStrategy
from tests.helpers.lightning_app import Recorder, loader, trainer

TRAIN, VAL, BATCH = 22, 13, 2
"""22 samples, 2 per data-parallel process and step: 6 steps per epoch, the last padded with 2; 13
validation samples: 4 steps, 3 padded in the last."""
STOP_AT = 3


class TensorParallelRecorder(Recorder):
    """``Recorder`` with a two-layer network, column- then row-parallel, sharded with FSDP2 over
    ``data_parallel``; SGD with momentum (optimizer state to restore) and a per-step ``LambdaLR``."""

    def __init__(self, out_dir: str) -> None:
        super().__init__(out_dir, scheduler="lambda")
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

    def configure_model(self) -> None:
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = self.device_mesh
        parallelize_module(
            self.net, mesh["tensor_parallel"], {"0": ColwiseParallel(), "2": RowwiseParallel()}
        )
        fully_shard(self.net, mesh=mesh["data_parallel"])

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        self.records["train"].append([self.current_epoch, batch_idx, batch["id"].tolist()])
        return nn.functional.mse_loss(self.net(batch["x"]), batch["y"])

    def configure_optimizers(self) -> Any:
        data = self.trainer.datamodule
        self.records["sizes"] = [data.num_processes, data.global_batch_size, data.steps_per_epoch]
        optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_fit_end(self) -> None:
        self.records["weights"] = [float(p.to_local().double().sum()) for p in self.net.parameters()]
        self.records["audits"] = [audit.summary() for audit in getattr(self.trainer.strategy, "audits", [])]
        super().on_fit_end()


class Data(ShardDataModule):
    def train_dataloader(self) -> DataLoader:
        return loader(TRAIN, BATCH, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return loader(VAL, BATCH)


def strategy(**kwargs: Any) -> ShardModelParallelStrategy:
    return ShardModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2, **kwargs)


def fit(out: Path, shard: ShardModelParallelStrategy, ckpt_path: str | None = None, **kwargs: Any) -> None:
    pl.seed_everything(0)
    model = TensorParallelRecorder(str(out))
    trainer(out, strategy=shard, devices=4, **kwargs).fit(model, datamodule=Data(), ckpt_path=ckpt_path)


def stop_and_resume(out: Path, distributed: bool) -> None:
    """Stop at step ``STOP_AT`` with a checkpoint in the given format, then resume from it for 2 epochs."""
    kind = "dcp" if distributed else "file"
    checkpoints = out / f"checkpoints_{kind}"
    save = ModelCheckpoint(checkpoints, every_n_train_steps=STOP_AT, save_top_k=-1, filename="{step}")
    shard = strategy(save_distributed_checkpoint=distributed)
    fit(out / f"stop_{kind}", shard, max_steps=STOP_AT, callbacks=[save], enable_checkpointing=True)
    (checkpoint,) = checkpoints.glob("*.ckpt")
    shard = strategy(save_distributed_checkpoint=distributed)
    fit(out / f"resume_{kind}", shard, ckpt_path=str(checkpoint), max_epochs=2)


def main(out: Path) -> None:
    for name in ("full", "stop_dcp", "resume_dcp", "stop_file", "resume_file", "dispatch"):
        (out / name).mkdir(parents=True, exist_ok=True)
    fit(out / "full", strategy(audit=True, audit_raise=True), max_epochs=2)
    stop_and_resume(out, distributed=True)
    stop_and_resume(out, distributed=False)
    fit(out / "dispatch", strategy(dispatch_batches=True, put_on_device=True), max_epochs=1)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
