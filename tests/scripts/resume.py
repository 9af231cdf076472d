"""Resume in every direction, for ``tests/lightning/test_resume.py``, one phase per call:

    python -m tests.scripts.resume PHASE OUT_DIR   (from the repository root)

``one`` (1 process): a shuffled fit stopped mid-epoch. ``two`` (2 processes): that checkpoint resumed
(1 -> 2); fits stopped mid-epoch in shard, ``split_batches`` and dispatch mode and over a (strided)
stream; a stop with 0 workers resumed with 2, and a stream that its workers split stopped with 2
workers, resumed with none; several training loaders stopped and resumed, and stopped to resume on
other counts; checkpoints written while validation runs inside an epoch, resumed. ``three`` (3
processes): the 2-process checkpoints resumed (2 -> 3), a ``split_batches`` checkpoint the new count
cannot split (refused), a 3-process stop. ``back`` (2 processes): the 3-process checkpoint resumed
(3 -> 2). ``fewer`` (1 process): the several loaders' checkpoints resumed (2 -> 1), and the shard
checkpoint with the loader built before the restore (2 -> 1). Each fit records
what every process trained on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import DataLoader

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard import ShardStrategy
from tests.helpers.lightning_app import Recorder, SizedRecordStream, WorkerSplitRecordStream, loader, trainer

LENGTH, BATCH, STOP_AT = 50, 4, 3
"""50 samples in batches of 4; the stopped fits checkpoint after 3 steps."""


def _dir(out: Path, name: str) -> Path:
    path = out / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _strategy(mode: str) -> Any:
    if mode == "split":
        return ShardStrategy(split_batches=True)
    if mode == "dispatch":
        return ShardStrategy(dispatch_batches=True, put_on_device=True)
    return "shard"


def _data(mode: str, **kwargs: Any) -> DataLoader:
    if mode == "split":
        return loader(LENGTH, 12, shuffle=True, **kwargs)  # 12: split by 2 and 3, not by 5
    if mode in ("dispatch", "stream"):
        return DataLoader(SizedRecordStream(LENGTH), batch_size=BATCH)
    if mode == "worker_split_stream":
        return DataLoader(WorkerSplitRecordStream(LENGTH), batch_size=BATCH, **kwargs)
    return loader(LENGTH, BATCH, shuffle=True, **kwargs)


def stop(out: Path, name: str, mode: str, devices: int, **data: Any) -> None:
    """A fit of 2 epochs stopped after ``STOP_AT`` steps, checkpointed there."""
    run = _dir(out, f"{name}/stop{devices}")
    save = ModelCheckpoint(
        out / name / f"checkpoints{devices}", every_n_train_steps=STOP_AT, filename="{step}"
    )
    pl.seed_everything(0)
    fit = trainer(
        run, _strategy(mode), devices, max_steps=STOP_AT, callbacks=[save], enable_checkpointing=True
    )
    fit.fit(Recorder(str(run), scheduler="lambda"), _data(mode, **data))


def resume(out: Path, name: str, mode: str, saved: int, devices: int, **data: Any) -> None:
    """The checkpoint written by ``saved`` processes, resumed on ``devices`` to the end of 2 epochs."""
    run = _dir(out, f"{name}/resume{saved}to{devices}")
    (checkpoint,) = (out / name / f"checkpoints{saved}").glob("*.ckpt")
    pl.seed_everything(1)  # NOTE: nothing but the checkpoint may carry the order
    fit = trainer(run, _strategy(mode), devices, max_epochs=2)
    fit.fit(Recorder(str(run), scheduler="lambda"), _data(mode, **data), ckpt_path=str(checkpoint))
    (run / "end.json").write_text(json.dumps({"schedule": fit.lr_scheduler_configs[0].scheduler.last_epoch}))


def full(out: Path, name: str, devices: int, make: Callable[[], Any], **settings: Any) -> None:
    run = _dir(out, f"{name}/full")
    pl.seed_everything(0)
    trainer(run, devices=devices, **{"max_epochs": 2, **settings}).fit(Recorder(str(run)), make())


def stream_workers(out: Path) -> None:
    """A stream its workers split, stopped with 2 workers and resumed with none; and the uninterrupted fit."""
    workers = {"num_workers": 2, "multiprocessing_context": "fork", "persistent_workers": False}
    mode = "worker_split_stream"
    stop(out, "stream_workers", mode, 2, **workers)
    resume(out, "stream_workers", mode, 2, 2)
    full(out, "stream_workers", 2, lambda: _data(mode, **workers))


# -- several training loaders, checkpoints during validation ----------------------------------------------
def _several(mode: str) -> Callable[[], Any]:
    def make() -> Any:
        loaders = {"long": loader(40, BATCH, shuffle=True), "short": loader(24, BATCH, shuffle=True)}
        return CombinedLoader(loaders, mode=mode)

    return make


class _Several(Recorder):
    """Records the ids of both loaders of each step (``None`` for an exhausted one)."""

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
        ids = {key: None if value is None else value["id"].tolist() for key, value in batch.items()}
        self.records["train"].append([self.current_epoch, batch_idx, ids])
        present = next(value for value in batch.values() if value is not None)
        return torch.nn.functional.mse_loss(self.layer(present["x"]), present["y"])


def several(out: Path, mode: str) -> None:
    name, make = f"several_{mode}", _several(mode)
    for run, steps in (("full", None), ("stop", STOP_AT + 1)):
        path = _dir(out, f"{name}/{run}")
        save = ModelCheckpoint(out / name / "checkpoints", every_n_train_steps=STOP_AT + 1, filename="{step}")
        pl.seed_everything(0)
        limits = {"max_steps": steps, "callbacks": [save], "enable_checkpointing": True} if steps else {}
        trainer(path, max_epochs=2, **limits).fit(_Several(str(path)), make())
    path = _dir(out, f"{name}/resume")
    (checkpoint,) = (out / name / "checkpoints").glob("*.ckpt")
    pl.seed_everything(1)
    trainer(path, max_epochs=2).fit(_Several(str(path)), make(), ckpt_path=str(checkpoint))


class _Pair(_Several):
    """``_Several`` that also records, at each epoch's start, the batches Lightning will run; with ``early``
    its ``configure_optimizers`` reads ``trainer.estimated_stepping_batches``, as sizing a ``OneCycleLR``
    does, so that Lightning builds the loaders before it restores the fit loop."""

    def __init__(self, out_dir: str, early: bool = False) -> None:
        super().__init__(out_dir)
        self.early = early
        self.records["epochs"] = []

    def on_train_epoch_start(self) -> None:
        self.records["epochs"].append([self.current_epoch, self.trainer.num_training_batches])

    def configure_optimizers(self) -> Any:
        if self.early:
            assert self.trainer.estimated_stepping_batches > 0
        return super().configure_optimizers()


def _pair(mode: str) -> CombinedLoader:
    """Two shuffled loaders whose epochs end at different steps: 24 samples in 3s, 14 in 2s."""
    return CombinedLoader({"a": loader(24, 3, shuffle=True), "b": loader(14, 2, shuffle=True)}, mode=mode)


def pair_stop(out: Path) -> None:
    """Each mode's pair of loaders on 2 processes, checkpointed after ``STOP_AT`` steps."""
    for mode in ("max_size_cycle", "min_size"):
        path = _dir(out, f"pair_{mode}/stop")
        save = ModelCheckpoint(
            out / f"pair_{mode}" / "checkpoints", every_n_train_steps=STOP_AT, filename="{step}"
        )
        pl.seed_everything(0)
        fit = trainer(path, max_steps=STOP_AT, callbacks=[save], enable_checkpointing=True)
        fit.fit(_Pair(str(path)), _pair(mode))


def pair_resume(out: Path, devices: int, early: tuple[bool, ...]) -> None:
    """The 2-process checkpoints resumed on ``devices`` to the end of 2 epochs."""
    for mode in ("max_size_cycle", "min_size"):
        (checkpoint,) = (out / f"pair_{mode}" / "checkpoints").glob("*.ckpt")
        for built_early in early:
            path = _dir(out, f"pair_{mode}/resume{devices}{'_early' if built_early else ''}")
            pl.seed_everything(1)
            trainer(path, devices=devices, max_epochs=2).fit(
                _Pair(str(path), built_early), _pair(mode), ckpt_path=str(checkpoint)
            )


def during_validation(out: Path) -> None:
    """Validation every 2 training steps; checkpoints written at a validation's end (a monitored metric)
    and at ``every_n_train_steps`` landing on a validated step; each resumed."""
    name = "validation"
    settings = {"val_check_interval": 2, "max_epochs": 2}
    make = lambda: loader(LENGTH, BATCH, shuffle=True)  # noqa: E731
    val = loader(22, BATCH)
    for run in ("full", "save"):
        path = _dir(out, f"{name}/{run}")
        callbacks = [
            ModelCheckpoint(
                out / name / "monitored", monitor="val_seen", mode="max", save_top_k=-1, filename="{step}"
            ),
            ModelCheckpoint(out / name / "every", every_n_train_steps=4, save_top_k=-1, filename="{step}"),
        ]
        pl.seed_everything(0)
        trainer(
            path, callbacks=callbacks if run == "save" else [], enable_checkpointing=run == "save", **settings
        ).fit(_Validated(str(path)), make(), val)
    for kind in ("monitored", "every"):
        checkpoint = out / name / kind / "step=4.ckpt"
        path = _dir(out, f"{name}/resume_{kind}")
        pl.seed_everything(1)
        trainer(path, **settings).fit(_Validated(str(path)), make(), val, ckpt_path=str(checkpoint))


class _Validated(Recorder):
    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        self.log("val_seen", float(self.trainer.global_step), sync_dist=True)


# -- phases ---------------------------------------------------------------------------------------------
def one(out: Path) -> None:
    stop(out, "shard", "shard", 1)


def two(out: Path) -> None:
    resume(out, "shard", "shard", 1, 2)
    for mode in ("shard", "split", "dispatch", "stream"):
        stop(out, mode, mode, 2)
    stop(out, "workers", "shard", 2)
    resume(out, "workers", "shard", 2, 2, num_workers=2, persistent_workers=False)
    full(out, "workers", 2, lambda: loader(LENGTH, BATCH, shuffle=True, num_workers=2))
    stream_workers(out)
    several(out, "max_size_cycle")
    several(out, "min_size")
    pair_stop(out)
    during_validation(out)


def three(out: Path) -> None:
    for mode in ("shard", "split", "dispatch", "stream"):
        resume(out, mode, mode, 2, 3)
    stop(out, "back", "shard", 3)
    _refuse_split(out)
    pair_resume(out, 3, early=(True,))


def _refuse_split(out: Path) -> None:
    """``split_batches`` with a global batch of 8 saved on 2 processes cannot resume on 3."""
    name = "split8"
    run = _dir(out, f"{name}/refused")
    try:
        trainer(run, ShardStrategy(split_batches=True), 3, max_epochs=1).fit(
            Recorder(str(run)), loader(LENGTH, 8)
        )
    except ValueError as error:
        (run / "error.txt").write_text(str(error))


def back(out: Path) -> None:
    resume(out, "back", "shard", 3, 2)


def fewer(out: Path) -> None:
    pair_resume(out, 1, early=(False, True))
    early_resume(out)


class _Early(Recorder):
    """``Recorder`` whose ``configure_optimizers`` reads ``trainer.estimated_stepping_batches``, as sizing a
    ``OneCycleLR`` does: Lightning builds the training loader before it restores the fit loop."""

    def configure_optimizers(self) -> Any:
        assert self.trainer.estimated_stepping_batches > 0
        return super().configure_optimizers()


def early_resume(out: Path) -> None:
    """The 2-process shard checkpoint resumed on 1 process with the loader built after the restore and
    before it, each under another global seed: only the checkpoint may carry the next epoch's order."""
    (checkpoint,) = (out / "shard" / "checkpoints2").glob("*.ckpt")
    for name, seed, module in (("late", 1, Recorder), ("early", 2, _Early)):
        run = _dir(out, f"shard/resume2to1_{name}")
        pl.seed_everything(seed)
        fit = trainer(run, "shard", 1, max_epochs=2)
        fit.fit(module(str(run), scheduler="lambda"), _data("shard"), ckpt_path=str(checkpoint))


PHASES = {function.__name__: function for function in (one, two, three, back, fewer)}

if __name__ == "__main__":
    PHASES[sys.argv[1]](Path(sys.argv[2]))
