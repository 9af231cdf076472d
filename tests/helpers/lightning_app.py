"""A small Lightning app for the adapter's tests: datasets that return their index, a module that
records which sample ids each process saw at each step, and helpers to read the records back."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, IterableDataset

from tests.helpers.datasets import WorkerSplitIdStream


def features(index: int) -> Tensor:
    generator = torch.Generator().manual_seed(index)
    return torch.randn(4, generator=generator)


class RecordMap(Dataset):
    """Sample ``i`` is ``{"id": i, "x": features(i), "y": sum(features(i))}``."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        x = features(index)
        return {"id": index, "x": x, "y": x.sum().reshape(1)}


class RecordStream(IterableDataset):
    """The samples of ``RecordMap`` as a stream of unknown length."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Any:
        return (RecordMap(self.length)[index] for index in range(self.length))


class SizedRecordStream(RecordStream):
    """``RecordStream`` with a length."""

    def __len__(self) -> int:
        return self.length


class WorkerSplitRecordStream(SizedRecordStream):
    """``SizedRecordStream`` split among ``DataLoader`` workers by the dataset (worker ``w`` of ``W`` reads
    ids ``w, w + W, ...``), so its order depends on the number of workers."""

    def __iter__(self) -> Any:
        return (RecordMap(self.length)[index] for index in WorkerSplitIdStream(self.length))


class Recorder(pl.LightningModule):
    """Records per process: the ids of each training step, gathered validation ids, learning rates."""

    def __init__(self, out_dir: str, lr: float = 0.1, scheduler: str = "none") -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.out_dir = out_dir
        self.lr = lr
        self.scheduler = scheduler
        self.records: dict[str, list[Any]] = {"train": [], "val": [], "test": [], "lr": [], "val_local": []}

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        ids = torch.as_tensor(batch["id"]).reshape(-1).tolist()  # NOTE: one uncollated sample has an int id
        self.records["train"].append([self.current_epoch, batch_idx, ids])
        return nn.functional.mse_loss(self.layer(batch["x"]), batch["y"])

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.records["lr"].append(
            [self.trainer.global_step, self.trainer.optimizers[0].param_groups[0]["lr"]]
        )

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.records["val_local"].append(batch["id"].tolist())
        self.records["val"].append(self.trainer.strategy.gather_for_metrics(batch["id"]).tolist())

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.records["test"].append(self.trainer.strategy.gather_for_metrics(batch["id"]).tolist())

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return batch["id"]

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        if self.scheduler == "lambda":
            schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
        if self.scheduler in ("onecycle", "onecycle_lightning"):
            # NOTE: sized from the estimated step count, as the README recommends; reading it makes
            # Lightning build and measure the training loaders inside `configure_optimizers`.
            strategy = self.trainer.strategy
            total = (
                strategy.estimated_scheduler_steps
                if self.scheduler == "onecycle"
                else int(self.trainer.estimated_stepping_batches) * strategy.scheduler_scaling.factor
            )
            schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.lr, total_steps=total)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
        if self.scheduler == "epoch":
            schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "epoch"}}
        return optimizer

    def on_fit_end(self) -> None:
        self.dump("fit")

    def on_test_end(self) -> None:
        self.dump("test")

    def on_validation_end(self) -> None:
        if self.trainer.state.fn == "validate":
            self.dump("validate")

    def dump(self, name: str) -> None:
        self.records["plan"] = [str(getattr(self.trainer.strategy, "shard_plan", None))]
        path = Path(self.out_dir) / f"{name}_rank{self.global_rank}.json"
        path.write_text(json.dumps(self.records))


def read_records(out_dir: str | os.PathLike[str], name: str, world_size: int) -> list[dict[str, Any]]:
    """Each rank's records of run ``name``, in rank order."""
    return [json.loads((Path(out_dir) / f"{name}_rank{rank}.json").read_text()) for rank in range(world_size)]


def loader(length: int, batch_size: int, **kwargs: Any) -> DataLoader:
    return DataLoader(RecordMap(length), batch_size=batch_size, **kwargs)


class IdWriter(pl.callbacks.BasePredictionWriter):
    """Writes, per process, the ``batch_indices`` Lightning reports next to the ids actually predicted."""

    def __init__(self, out_dir: str) -> None:
        super().__init__(write_interval="batch_and_epoch")
        self.out_dir = out_dir
        self.batches: list[Any] = []

    def write_on_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        prediction: Any,
        batch_indices: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        self.batches.append([list(batch_indices), prediction.tolist()])

    def write_on_epoch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        record = {
            "batches": self.batches,
            "epoch_indices": [list(indices) for indices in batch_indices[0]],
            "epoch_predictions": [prediction.tolist() for prediction in predictions],
        }
        path = Path(self.out_dir) / f"predict_rank{trainer.global_rank}.json"
        path.write_text(json.dumps(record))


def trainer(out: Path, strategy: Any = "shard", devices: int = 2, **kwargs: Any) -> pl.Trainer:
    """A quiet CPU ``Trainer`` writing under ``out``; ``kwargs`` override any setting."""
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": False,
        "num_sanity_val_steps": 0,
        "default_root_dir": str(out),
    }
    settings.update(kwargs)
    return pl.Trainer(strategy=strategy, devices=devices, **settings)
