"""A small real task with generated data: classify points of 4 Gaussian blobs in 8 dimensions.

Shared by ``train.py``, ``cli.py`` and ``benchmarks/bench_lightning.py``. Each sample carries its
index, so the examples can check which samples each process trained on.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from lightning_shard import ShardDataModule, ShardStrategy
from lightning_shard.comm.collectives import all_gather_objects


class Blobs(Dataset):
    """``length`` points of 4 Gaussian blobs in 8 dimensions; sample ``i`` is ``{"index", "x", "y"}``.

    The blobs are the same for every ``seed``; ``seed`` draws the points.
    """

    def __init__(self, length: int, seed: int = 0) -> None:
        centers = torch.randn(4, 8, generator=torch.Generator().manual_seed(1234)) * 2
        generator = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 4, (length,), generator=generator)
        self.x = centers[self.y] + torch.randn(length, 8, generator=generator)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index, "x": self.x[index], "y": self.y[index]}


class BlobsData(ShardDataModule):
    """Training and validation blobs; ``ShardStrategy`` shards both (validation exactly)."""

    def __init__(self, train_size: int = 2000, val_size: int = 500, batch_size: int = 32) -> None:
        super().__init__()
        self.train_size = train_size
        self.val_size = val_size
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(Blobs(self.train_size, seed=0), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(Blobs(self.val_size, seed=1), batch_size=2 * self.batch_size)


class Classifier(pl.LightningModule):
    """A small MLP trained with AdamW and a ``OneCycleLR`` sized from the datamodule.

    Records ``(epoch, batch_idx, indices)`` of every training step for the examples' checks.
    """

    def __init__(self, hidden: int = 32, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4))
        self.seen: list[tuple[int, int, list[int]]] = []
        self.all_seen: list[tuple[int, int, list[int]]] = []
        self.accuracies: list[tuple[int, int, float]] = []
        self._correct: list[Tensor] = []

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        self.seen.append((self.current_epoch, batch_idx, batch["index"].tolist()))
        return nn.functional.cross_entropy(self.net(batch["x"]), batch["y"])

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        correct = (self.net(batch["x"]).argmax(dim=1) == batch["y"]).float()
        strategy = self.trainer.strategy
        # NOTE: `gather_for_metrics` drops the samples repeated to even out the last batch, so the
        # accuracy is over exactly the validation set, not over the set plus padding.
        self._correct.append(
            strategy.gather_for_metrics(correct) if isinstance(strategy, ShardStrategy) else correct
        )

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or not self._correct:
            self._correct.clear()
            return
        correct = torch.cat(self._correct)
        self._correct.clear()
        self.accuracies.append((self.current_epoch, len(correct), correct.mean().item()))

    def on_train_end(self) -> None:
        self.all_seen = [step for steps in all_gather_objects(self.seen) for step in steps]

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams["lr"])
        data = self.trainer.datamodule
        total_steps = data.scheduler_steps_per_epoch * self.trainer.max_epochs
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=self.hparams["lr"], total_steps=total_steps
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
