"""Exact evaluation with the tools Lightning users use, on ``DEVICES`` processes, for
``tests/lightning/test_evaluation.py``:

    python -m tests.scripts.evaluation DEVICES OUT_DIR   (from the repository root)

Unchanged user code: torchmetrics metrics updated in ``validation_step`` and logged, a per-batch mean
logged with ``sync_dist=True``, outputs gathered in the step and once at the epoch's end, a step that
takes ``dataloader_iter``; ``trainer.predict`` over map-style and iterable data, and a prediction
writer. Rank 0 writes what it got to ``OUT_DIR/DEVICES.json``; the test compares 1, 2 and 3 processes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torchmetrics
from torch import Tensor, nn

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard import ShardPredictionWriter, ShardStrategy
from tests.helpers.lightning_app import loader, trainer

LENGTH, BATCH = 103, 8


def _score(ids: Tensor) -> Tensor:
    """A deterministic score in (0, 1) per sample, so AUROC has something to rank."""
    return torch.sigmoid(torch.sin(ids.float()))


class Evaluated(pl.LightningModule):
    """Validation with torchmetrics and ``self.log``, as a user writes it; records what it gathered."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.mean = torchmetrics.MeanMetric()
        self.sum = torchmetrics.SumMetric()
        self.accuracy = torchmetrics.classification.BinaryAccuracy()
        self.auroc = torchmetrics.classification.BinaryAUROC()
        self.cat = torchmetrics.CatMetric()
        self.collected: list[Tensor] = []
        self.records: dict[str, Any] = {}

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        ids = batch["id"]
        targets = (ids % 2 == 0).long()
        self.mean.update(ids.float())
        self.sum.update(ids.float())
        self.accuracy.update(_score(ids), targets)
        self.auroc.update(_score(ids), targets)
        self.cat.update(ids.float())
        for name in ("mean", "sum", "accuracy", "auroc"):
            self.log(name, getattr(self, name), on_epoch=True)
        self.log("batch_mean", ids.float().mean(), sync_dist=True, on_epoch=True)
        self.log("batch_sum", ids.float().sum(), sync_dist=True, on_epoch=True, reduce_fx="sum")
        self.collected.append(ids)
        rows = [{"id": int(i), "name": f"s{int(i)}"} for i in ids]
        self.records.setdefault("step_dicts", []).extend(self.trainer.strategy.gather_for_metrics(rows))
        ragged = ids[: 1 + self.global_rank]  # rows differ per process
        self.records.setdefault("step_ragged", []).extend(
            self.trainer.strategy.gather_for_metrics(ragged).tolist()
        )

    def on_validation_epoch_end(self) -> None:
        gathered = self.trainer.strategy.gather_for_metrics(torch.cat(self.collected))
        self.records["epoch_ids"] = gathered.tolist()
        self.records["cat"] = self.cat.compute().tolist()
        self.collected = []

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.log("test_mean", batch["id"].float().mean(), sync_dist=True, on_epoch=True)

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return batch["id"]


class StepsWithIterator(pl.LightningModule):
    """A ``validation_step`` that takes ``dataloader_iter``."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.gathered: list[int] = []

    def validation_step(self, dataloader_iter: Any) -> None:
        batch, _, _ = next(dataloader_iter)
        self.gathered += self.trainer.strategy.gather_for_metrics(batch["id"]).tolist()


def _metrics(run: pl.Trainer) -> dict[str, float]:
    return {name: float(value) for name, value in run.callback_metrics.items()}


def _listed(predictions: Any) -> list[list[int]]:
    return [batch.tolist() for batch in predictions]


def main(devices: int, out: Path) -> None:
    pl.seed_everything(0)
    model, results = Evaluated(), {}
    run = trainer(out, devices=devices)
    run.validate(model, loader(LENGTH, BATCH))
    results["validate"] = _metrics(run)
    results.update(model.records)
    iterating = StepsWithIterator()
    run = trainer(out, devices=devices)
    run.validate(iterating, loader(LENGTH, BATCH))
    results["dataloader_iter"] = iterating.gathered
    run = trainer(out, devices=devices)
    run.test(model, loader(LENGTH, BATCH))
    results["test"] = _metrics(run)
    results["predict"] = _listed(trainer(out, devices=devices).predict(model, loader(37, 4)))
    split = ShardStrategy(split_batches=True) if devices > 1 else "shard"
    results["predict_split"] = _listed(
        trainer(out, strategy=split, devices=devices).predict(model, loader(37, 6))
    )
    writer = ShardPredictionWriter(out / f"written{devices}")
    trainer(out, devices=devices, callbacks=[writer]).predict(model, loader(37, 4), return_predictions=False)
    if run.global_rank == 0:
        written = torch.load(out / f"written{devices}" / "predictions.pt", weights_only=False)
        results["written"] = [_listed(written["predictions"]), written["batch_indices"]]
        (out / f"{devices}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
