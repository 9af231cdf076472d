"""Feature pairs that each worked alone and lost or repeated data together (issue 17), for
``tests/lightning/test_combinations.py``, one phase per call:

    python -m tests.scripts.combinations PHASE OUT_DIR   (from the repository root)

``estimated`` (2 processes): fits whose ``configure_optimizers`` sizes a ``OneCycleLR`` from the estimated
step count (which makes Lightning build the training loader before the checkpoint is restored), stopped
mid-epoch and resumed, under ``ShardStrategy`` and ``ShardModelParallelStrategy``; and the uninterrupted
fits. ``subclass`` (2 processes): a ``DataLoader`` subclass with its own ``__iter__`` trained and
predicted. ``stream_stop`` (2 processes) / ``stream_resume`` (3 processes): a stream its 2 workers split,
stopped mid-epoch and resumed on 3 processes. Every fit records what each process trained on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard import ShardModelParallelStrategy, ShardStrategy
from tests.helpers.lightning_app import (
    IdWriter,
    Recorder,
    RecordMap,
    WorkerSplitRecordStream,
    loader,
    trainer,
)

LENGTH, BATCH, STOP_AT = 50, 4, 3
"""50 samples in batches of 4; the stopped fits checkpoint after 3 steps."""
WORKERS = {"num_workers": 2, "multiprocessing_context": "fork", "persistent_workers": False}


def _dir(out: Path, name: str) -> Path:
    path = out / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _strategy(kind: str) -> Any:
    if kind == "model_parallel":
        return ShardModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    return ShardStrategy()


class _ShardedRecorder(Recorder):
    """``Recorder`` whose layer is FSDP2-sharded over the data-parallel mesh (``ShardModelParallelStrategy``
    requires ``configure_model``)."""

    def configure_model(self) -> None:
        from torch.distributed.fsdp import fully_shard

        fully_shard(self.layer, mesh=self.device_mesh["data_parallel"])


class StopAt(pl.Callback):
    """Ends the fit after ``step`` optimizer steps, as a preemption would, leaving every setting (and so
    ``estimated_stepping_batches``) as in the uninterrupted fit."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def _stop_and_resume(
    out: Path, name: str, make: Any, strategy: Any, scheduler: str, devices: int = 2
) -> None:
    """The uninterrupted fit, the fit stopped after ``STOP_AT`` steps, and its resume, 2 epochs each."""
    checkpoints = out / name / "checkpoints"
    for run in ("full", "stop"):
        path = _dir(out, f"{name}/{run}")
        pl.seed_everything(0)
        extra: dict[str, Any] = {}
        if run == "stop":
            save = ModelCheckpoint(checkpoints, every_n_train_steps=STOP_AT, filename="{step}")
            extra = {"callbacks": [save, StopAt(STOP_AT)], "enable_checkpointing": True}
        fit = trainer(path, strategy(), devices, **{"max_epochs": 2, **extra})
        fit.fit(_module(strategy, path, scheduler), make())
    path = _dir(out, f"{name}/resume")
    (checkpoint,) = checkpoints.glob("*.ckpt")
    pl.seed_everything(1)  # NOTE: nothing but the checkpoint may carry the order
    fit = trainer(path, strategy(), devices, max_epochs=2)
    fit.fit(_module(strategy, path, scheduler), make(), ckpt_path=str(checkpoint))


def _module(strategy: Any, path: Path, scheduler: str) -> Recorder:
    sharded = isinstance(strategy(), ShardModelParallelStrategy)
    return (_ShardedRecorder if sharded else Recorder)(str(path), scheduler=scheduler)


def estimated(out: Path) -> None:
    make = lambda: loader(LENGTH, BATCH, shuffle=True)  # noqa: E731
    for scheduler in ("onecycle", "onecycle_lightning"):
        _stop_and_resume(out, f"estimated_{scheduler}", make, lambda: _strategy("ddp"), scheduler)
    _stop_and_resume(out, "estimated_model_parallel", make, lambda: _strategy("model_parallel"), "onecycle")


class ReversedLoader(DataLoader):
    """A user's ``DataLoader`` subclass: its ``__iter__`` reverses every batch, and it has an attribute."""

    def __init__(self, *args: Any, marker: str = "mine", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marker = marker

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            yield {key: value.flip(0) for key, value in batch.items()}


class _ClassRecorder(Recorder):
    """Records, with each step's ids, the class and marker of the loader Lightning holds."""

    def on_train_start(self) -> None:
        held = self.trainer.train_dataloader
        self.records["loader"] = [type(held).__name__, getattr(held, "marker", None)]

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
        held = self.trainer.predict_dataloaders
        self.records["predict_loader"] = [type(held).__name__, getattr(held, "marker", None)]
        self.records["predict"].append(batch["id"].tolist())
        return batch["id"]

    def on_predict_start(self) -> None:
        self.records["predict"] = []

    def on_predict_end(self) -> None:
        self.dump("predict_records")


def subclass(out: Path) -> None:
    for run in ("train", "plain"):
        path = _dir(out, f"subclass/{run}")
        make = ReversedLoader if run == "train" else DataLoader
        extra = {"marker": "kept"} if run == "train" else {}
        pl.seed_everything(0)
        fit = trainer(path, "shard", 2, max_epochs=1)
        model = _ClassRecorder(str(path))
        fit.fit(model, make(RecordMap(LENGTH), batch_size=BATCH, **extra))
        fit = trainer(path, "shard", 2, callbacks=[IdWriter(str(path))])
        fit.predict(model, make(RecordMap(LENGTH - 3), batch_size=BATCH, **extra), return_predictions=False)


def stream_stop(out: Path) -> None:
    make = lambda: DataLoader(WorkerSplitRecordStream(31), batch_size=2, **WORKERS)  # noqa: E731
    name, checkpoints = "stream", out / "stream" / "checkpoints"
    for run in ("full", "stop"):
        path = _dir(out, f"{name}/{run}")
        pl.seed_everything(0)
        extra: dict[str, Any] = {}
        if run == "stop":
            save = ModelCheckpoint(checkpoints, every_n_train_steps=STOP_AT, filename="{step}")
            extra = {"max_steps": STOP_AT, "callbacks": [save], "enable_checkpointing": True}
        trainer(path, "shard", 2, **{"max_epochs": 2, **extra}).fit(Recorder(str(path)), make())


def stream_resume(out: Path) -> None:
    path = _dir(out, "stream/resume")
    (checkpoint,) = (out / "stream" / "checkpoints").glob("*.ckpt")
    make = DataLoader(WorkerSplitRecordStream(31), batch_size=2, **WORKERS)
    trainer(path, "shard", 3, max_epochs=2).fit(Recorder(str(path)), make, ckpt_path=str(checkpoint))


def fabric_break(out: Path) -> None:
    """Fabric, seedable sampler: 3 epochs read whole, then 3 epochs each left after ``STOP_AT`` batches."""
    import lightning as L

    from lightning_shard import ShardFabricStrategy

    fabric = L.Fabric(accelerator="cpu", devices=2, strategy=ShardFabricStrategy(use_seedable_sampler=True))
    fabric.launch()
    records: dict[str, Any] = {}
    for run in ("whole", "broken"):
        data = fabric.setup_dataloaders(loader(LENGTH, BATCH, shuffle=True))
        epochs = []
        for _ in range(3):
            epoch = []
            for step, batch in enumerate(data):
                epoch.append(batch["id"].tolist())
                if run == "broken" and step + 1 == STOP_AT:
                    break
            epochs.append(epoch)
        records[run] = epochs
        records[f"{run}_state_epoch"] = data._dataloader.state_dict()[
            "epoch"
        ]  # NOTE: Fabric's wrapper holds ours
    (out / f"fabric_rank{fabric.global_rank}.json").write_text(json.dumps(records))
    # NOTE: every rank ends here before any exits: rank 0 (the launcher's process) leaving while rank 1 is
    # still connected aborts now and then in torch's teardown of the gloo group ("terminate called without
    # an active exception", exit 134; about 1 run in 8 of this script, none with this barrier).
    fabric.barrier()


def misspelled(out: Path) -> None:
    """A ``ShardDataModule`` whose per-stage options name ``"val"`` for ``"validate"``: every rank writes
    what it raised at set-up."""
    from lightning_shard import ShardDataModule

    class Data(ShardDataModule):
        shard_stage_options = {"val": {"even_batches": True}}

        def train_dataloader(self) -> DataLoader:
            return loader(LENGTH, BATCH)

    fit = trainer(out, "shard", 2, max_epochs=1)
    try:
        fit.fit(Recorder(str(out)), datamodule=Data())
    except ValueError as error:
        (out / f"refused_rank{fit.global_rank}.txt").write_text(str(error))


def stateful_constructor(out: Path) -> None:
    """The seed's ``DataLoaderShard(..., use_stateful_dataloader=True)`` on each of 2 gloo processes: a
    ``StatefulDataLoader`` whose state, saved after 2 batches, continues in a fresh loader."""
    import torch.distributed as dist
    from torch.utils.data import BatchSampler, SequentialSampler
    from torchdata.stateful_dataloader import StatefulDataLoader

    from lightning_shard import BatchSamplerShard, DataLoaderShard

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def build() -> DataLoaderShard:
        shard = BatchSamplerShard(
            BatchSampler(SequentialSampler(range(20)), 2, drop_last=False),
            num_processes=2,
            process_index=rank,
        )
        return DataLoaderShard(list(range(20)), batch_sampler=shard, use_stateful_dataloader=True)

    first = build()
    batches = iter(first)
    head = [next(batches).tolist() for _ in range(2)]
    again = build()
    again.load_state_dict(first.state_dict())
    record = {
        "stateful": isinstance(first, StatefulDataLoader),
        "head": head,
        "rest": [batch.tolist() for batch in again],
        "whole": [batch.tolist() for batch in build()],
    }
    (out / f"stateful_rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


PHASES = {
    function.__name__: function
    for function in (
        estimated,
        subclass,
        stream_stop,
        stream_resume,
        fabric_break,
        misspelled,
        stateful_constructor,
    )
}

if __name__ == "__main__":
    PHASES[sys.argv[1]](Path(sys.argv[2]))
