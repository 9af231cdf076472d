"""Real 2-process ``lightning.Trainer`` runs for ``tests/lightning/test_fit.py``, one scenario per call:

    python -m tests.scripts.scenarios SCENARIO OUT_DIR   (from the repository root)

Each scenario writes what every process saw to ``OUT_DIR``; the tests read it back and check it. The
strategy is ``"shard"`` (Lightning re-runs this script for process 1, which then lives through every
fit of the scenario); run it as a subprocess so that a hang ends in a timeout, not a stalled suite.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard.lightning import ShardDataModule, ShardStrategy
from tests.helpers.lightning_app import IdWriter, Recorder, RecordStream, SizedRecordStream, loader, trainer


def basic(out: Path) -> None:
    """Shuffled training over 2 epochs with a per-step scheduler, exact validation, test and predict."""
    model = Recorder(str(out), scheduler="lambda")
    fit = trainer(out, max_epochs=2)
    fit.fit(model, loader(50, 4, shuffle=True), loader(103, 8))
    trainer(out).test(model, loader(103, 8))
    trainer(out, callbacks=[IdWriter(str(out))]).predict(model, loader(37, 4), return_predictions=False)


def modes(out: Path) -> None:
    """The other modes, one fit each: ``split_batches``, ``dispatch_batches`` (with ``even_batches=False``
    too), refused ``even_batches=False``."""
    _split(out / "split")
    _dispatch(out / "dispatch")
    _dispatch_uneven(out / "dispatch_uneven")
    _uneven(out / "uneven")  # NOTE: last: Lightning ends process 1 when a fit fails on process 0


def _split(out: Path) -> None:
    """``split_batches=True``: each global batch of 8 is split in two; the scheduler steps once."""
    model = Recorder(str(out), scheduler="lambda")
    strategy = ShardStrategy(split_batches=True)
    trainer(out, strategy=strategy, max_epochs=1).fit(model, loader(50, 8, shuffle=True), loader(103, 8))


def _dispatch(out: Path) -> None:
    """``dispatch_batches=True`` with an ``IterableDataset``: process 0 loads, the other receives.

    The per-epoch scheduler is not scaled by the number of processes.
    """
    strategy = ShardStrategy(dispatch_batches=True, put_on_device=True)
    data = DataLoader(SizedRecordStream(45), batch_size=4)
    trainer(out, strategy=strategy, max_epochs=2).fit(Recorder(str(out), scheduler="epoch"), data)


def _dispatch_uneven(out: Path) -> None:
    """``dispatch_batches=True``, ``even_batches=False``: 46 samples in 12 batches of 4, 6 steps each, the last
    global batch's 6 real rows only (4 to process 0, 2 to process 1), nothing repeated."""
    strategy = ShardStrategy(dispatch_batches=True, even_batches=False, put_on_device=True)
    trainer(out, strategy=strategy, max_epochs=1).fit(Recorder(str(out)), loader(46, 4, shuffle=True))


def _uneven(out: Path) -> None:
    """``even_batches=False`` in training is refused before any step (it would hang DDP)."""
    strategy = ShardStrategy(even_batches=False)
    try:
        trainer(out, strategy=strategy, max_epochs=1).fit(Recorder(str(out)), loader(50, 4))
    except Exception as error:  # noqa: BLE001 - the message is what the test checks
        (out / "error.txt").write_text(str(error))


class _PositionRecorder(Recorder):
    """Also records, after each training step, the position a checkpoint written then would save."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_end(outputs, batch, batch_idx)
        saved = self.trainer.train_dataloader.state_dict()
        self.records.setdefault("saved", []).append(
            [self.current_epoch, batch_idx, saved["epoch"], saved["steps"]]
        )


def _resume(out: Path, make_loader: Callable[[], DataLoader], stop_after: int) -> None:
    """An uninterrupted run, a run stopped mid-epoch by a checkpoint, and its resume."""
    checkpoints = out / "checkpoints"
    pl.seed_everything(0)
    full = _PositionRecorder(str(out / "full"), scheduler="lambda")
    trainer(out / "full", max_epochs=2).fit(full, make_loader())
    pl.seed_everything(0)
    save = ModelCheckpoint(checkpoints, every_n_train_steps=stop_after, save_top_k=-1, filename="{step}")
    stop = trainer(out / "stop", max_steps=stop_after, callbacks=[save], enable_checkpointing=True)
    stop.fit(_PositionRecorder(str(out / "stop"), scheduler="lambda"), make_loader())
    _resume_on(out, make_loader, devices=2)


def _resume_on(out: Path, make_loader: Callable[[], DataLoader], devices: int) -> None:
    (checkpoint,) = (out / "checkpoints").glob("*.ckpt")
    name = f"resume{devices}"
    resumed = trainer(out / name, devices=devices, max_epochs=2)
    model = _PositionRecorder(str(out / name), scheduler="lambda")
    resumed.fit(model, make_loader(), ckpt_path=str(checkpoint))


def _shuffled() -> DataLoader:
    return loader(50, 4, shuffle=True)


def resume(out: Path) -> None:
    _resume(out, _shuffled, stop_after=3)


def resume_elastic(out: Path) -> None:
    """The checkpoint of ``resume`` (2 processes), resumed on 1 process."""
    _resume_on(out, _shuffled, devices=1)


def resume_stream(out: Path) -> None:
    """Resume with a stream of unknown length, which Lightning reads one batch ahead of training."""
    _resume(out, lambda: DataLoader(RecordStream(45), batch_size=4), stop_after=2)


class _Data(ShardDataModule):
    shard_stage_options = {"validate": {"split_batches": True}}

    def train_dataloader(self) -> DataLoader:
        return loader(50, 4, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return loader(103, 8)


class _OneCycle(Recorder):
    """Sizes a ``OneCycleLR`` from the datamodule inside ``configure_optimizers``."""

    def configure_optimizers(self) -> Any:
        data = self.trainer.datamodule
        total = data.scheduler_steps_per_epoch * self.trainer.max_epochs
        self.records["sizes"] = [data.num_processes, data.global_batch_size, data.steps_per_epoch, total]
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_train_end(self) -> None:
        self.records["schedule_end"] = [self.trainer.lr_scheduler_configs[0].scheduler.last_epoch]


def datamodule(out: Path) -> None:
    """A ``ShardDataModule`` with a per-stage option, sizing a ``OneCycleLR``, accumulating 2 batches."""
    trainer(out, max_epochs=2, accumulate_grad_batches=2).fit(_OneCycle(str(out)), datamodule=_Data())


SCENARIOS = {
    function.__name__: function
    for function in (basic, modes, datamodule, resume, resume_elastic, resume_stream)
}

if __name__ == "__main__":
    name, out_dir = sys.argv[1], Path(sys.argv[2])
    for directory in (
        "",
        "full",
        "stop",
        "resume2",
        "resume1",
        "split",
        "dispatch",
        "dispatch_uneven",
        "uneven",
    ):
        (out_dir / directory).mkdir(parents=True, exist_ok=True)
    pl.seed_everything(0)
    SCENARIOS[name](out_dir)
