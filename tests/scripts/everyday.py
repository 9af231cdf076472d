"""Everyday Trainer features combined with ``ShardStrategy`` on 2 processes, for
``tests/lightning/test_everyday.py``:

    python -m tests.scripts.everyday OUT_DIR   (from the repository root)

Each scenario writes what every process trained on (``Recorder``) under ``OUT_DIR/<scenario>/...``.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, DistributedSampler

from lightning_shard import ShardDataModule, ShardStrategy
from tests.helpers.lightning_app import Recorder, RecordMap, loader, trainer


def _dir(out: Path, *parts: str) -> Path:
    path = out.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def reload_and_resume(out: Path) -> None:
    """``reload_dataloaders_every_n_epochs=1``: uninterrupted, stopped in epoch 1, resumed."""
    settings = {"reload_dataloaders_every_n_epochs": 1}
    pl.seed_everything(0)
    full = _dir(out, "reload", "full")
    trainer(full, max_epochs=3, **settings).fit(Recorder(str(full)), loader(40, 4, shuffle=True))
    pl.seed_everything(0)
    stop, checkpoints = _dir(out, "reload", "stop"), _dir(out, "reload", "checkpoints")
    save = ModelCheckpoint(checkpoints, every_n_train_steps=7, save_top_k=-1, filename="{step}")
    run = trainer(stop, max_steps=7, callbacks=[save], enable_checkpointing=True, **settings)
    run.fit(Recorder(str(stop)), loader(40, 4, shuffle=True))
    pl.seed_everything(0)
    resume = _dir(out, "reload", "resume")
    (checkpoint,) = checkpoints.glob("*.ckpt")
    run = trainer(resume, max_epochs=3, **settings)
    run.fit(Recorder(str(resume)), loader(40, 4, shuffle=True), ckpt_path=str(checkpoint))


def fit_twice(out: Path) -> None:
    """Two fits on one trainer (2 epochs, then up to 4) against one fit of 4 epochs."""
    pl.seed_everything(0)
    full = _dir(out, "twice", "full")
    trainer(full, max_epochs=4).fit(Recorder(str(full)), loader(40, 4, shuffle=True))
    pl.seed_everything(0)
    twice = _dir(out, "twice", "twice")
    run, model, data = trainer(twice, max_epochs=2), Recorder(str(twice)), loader(40, 4, shuffle=True)
    run.fit(model, data)
    run.fit_loop.max_epochs = 4
    run.fit(model, data)


class _Uneven:
    """A batch sampler without a ``batch_size``: batches of 3, 1, 2, 3, 1, 2, ..."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Any:
        start, sizes = 0, itertools.cycle([3, 1, 2])
        while start < self.length:
            size = next(sizes)
            yield list(range(start, min(start + size, self.length)))
            start += size

    def __len__(self) -> int:
        return sum(1 for _ in self)


def without_batch_size(out: Path) -> None:
    """Per-sample loading (``batch_size=None``) and a batch sampler without a batch size."""
    per_sample = _dir(out, "no_batch_size", "per_sample")
    trainer(per_sample, max_epochs=2).fit(
        Recorder(str(per_sample)), DataLoader(RecordMap(13), batch_size=None)
    )
    custom = _dir(out, "no_batch_size", "custom")
    trainer(custom, max_epochs=1).fit(
        Recorder(str(custom)), DataLoader(RecordMap(20), batch_sampler=_Uneven(20))
    )


class _GatheringAtEpochEnd(Recorder):
    """Gathers in the step (the padding of the last one dropped) and refuses to at the epoch's end."""

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
        self.records.setdefault("gathered", []).append(
            self.trainer.strategy.gather_for_metrics(batch["id"]).tolist()
        )
        return super().training_step(batch, batch_idx)

    def on_train_epoch_end(self) -> None:
        try:
            self.trainer.strategy.gather_for_metrics(torch.zeros(1))
        except ValueError as error:
            self.records["refused"] = [str(error)]


def gather_in_training(out: Path) -> None:
    run = _dir(out, "gather")
    trainer(run, max_epochs=1).fit(_GatheringAtEpochEnd(str(run)), loader(22, 4))


class _OneCycle(Recorder):
    """A ``OneCycleLR`` sized by ``trainer.estimated_stepping_batches`` (too short: the schedule is
    stepped twice per optimizer step) or by ``trainer.strategy.estimated_scheduler_steps`` (right)."""

    def __init__(self, out_dir: str, sized_by_strategy: bool) -> None:
        super().__init__(out_dir)
        self.sized_by_strategy = sized_by_strategy

    def configure_optimizers(self) -> Any:
        trainer = self.trainer
        total = (
            trainer.strategy.estimated_scheduler_steps
            if self.sized_by_strategy
            else trainer.estimated_stepping_batches
        )
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=int(total))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_train_end(self) -> None:
        self.records["schedule"] = [self.trainer.lr_scheduler_configs[0].scheduler.last_epoch]


def scheduler_horizon(out: Path) -> None:
    for name, by_strategy in (("trainer", False), ("strategy", True)):
        run = _dir(out, "horizon", name)
        trainer(run, max_epochs=2).fit(_OneCycle(str(run), by_strategy), loader(40, 4, shuffle=True))


def opt_out(out: Path) -> None:
    """``Trainer(use_distributed_sampler=False)``: the loaders are left as they are, as under DDP."""
    plain = _dir(out, "opt_out", "plain")
    trainer(plain, max_epochs=1, use_distributed_sampler=False).fit(Recorder(str(plain)), loader(40, 4))
    own = _dir(out, "opt_out", "own")
    data = RecordMap(40)
    # NOTE: built before Lightning starts the process group, so the rank comes from Lightning's launcher.
    sampler = DistributedSampler(
        data, num_replicas=2, rank=int(os.environ.get("LOCAL_RANK", 0)), shuffle=False
    )
    run = trainer(own, max_epochs=1, use_distributed_sampler=False)
    run.fit(Recorder(str(own)), DataLoader(data, batch_size=4, sampler=sampler))
    sized = _dir(out, "opt_out", "sized")
    run = trainer(
        sized, strategy=ShardStrategy(split_batches=True), max_epochs=1, use_distributed_sampler=False
    )
    run.fit(_Sized(str(sized)), datamodule=_WholeBatches())


class _WholeBatches(ShardDataModule):
    def train_dataloader(self) -> DataLoader:
        return loader(160, 32)


class _Sized(Recorder):
    """Records the datamodule's sizes in ``configure_optimizers``."""

    def configure_optimizers(self) -> Any:
        data = self.trainer.datamodule
        self.records["sizes"] = [data.num_processes, data.global_batch_size, data.steps_per_epoch]
        return super().configure_optimizers()


SCENARIOS = (reload_and_resume, fit_twice, without_batch_size, gather_in_training, scheduler_horizon, opt_out)

if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    for scenario in SCENARIOS:
        scenario(out_dir)
