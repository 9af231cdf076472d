"""Real 2-process ``lightning.Trainer`` runs over LitData streams for ``tests/lightning/test_litdata.py``:

    python -m tests.scripts.litdata_fits SCENARIO DATA_DIR OUT_DIR   (from the repository root)

``DATA_DIR`` holds ids ``0 .. 49`` written by ``litdata.optimize`` (chunks of 8). The datasets are built
as users build them: at the script's top level, before ``fit`` starts the process group (so LitData
detects one process), or inside a ``LightningDataModule``'s hooks. Each fit records the ids every process
trained on at each step and the ids validation gathered; the tests read them back (docs/DESIGN.md,
"LitData").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from litdata import CombinedStreamingDataset, StreamingDataLoader, StreamingDataset
from torch import Tensor, nn
from torch.utils.data import DataLoader

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard.lightning import ShardStrategy
from tests.helpers.lightning_app import Recorder, features, trainer


class IdRecorder(Recorder):
    """``Recorder`` for batches that hold only ids (the features are computed from them)."""

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        ids = batch["id"]
        self.records["train"].append([self.current_epoch, batch_idx, ids.tolist()])
        x = torch.stack([features(int(index)) for index in ids])
        return nn.functional.mse_loss(self.layer(x), x.sum(dim=1, keepdim=True))

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        ids = batch["id"]
        self.records["val_local"].append(ids.tolist())
        self.records["val"].append(self.trainer.strategy.gather_for_metrics(ids).tolist())

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return batch["id"]


def _shuffled(data: str, streaming: bool = True, workers: int = 0) -> DataLoader:
    dataset = StreamingDataset(data, shuffle=True, seed=3)
    if streaming:
        return StreamingDataLoader(dataset, batch_size=4, num_workers=workers)
    return DataLoader(dataset, batch_size=4, num_workers=workers)


def _in_order(data: str) -> StreamingDataLoader:
    """Batches of 3: LitData gives rank 0 8 batches (24 ids) and rank 1 the rest (26 ids), in order."""
    return StreamingDataLoader(StreamingDataset(data), batch_size=3)


def fits(data: str, out: Path) -> None:
    """The issue's script: a shuffled stream through a plain ``DataLoader`` and through LitData's loader,
    validation and predict on an ordered one, and all stopping at the shortest share."""
    plain = _shuffled(data, streaming=False)  # NOTE: built before `fit`: LitData sees one process.
    trainer(out / "plain", max_epochs=1).fit(IdRecorder(str(out / "plain")), plain, _in_order(data))
    streaming = _shuffled(data)
    trainer(out / "streaming", max_epochs=1).fit(IdRecorder(str(out / "streaming")), streaming)
    shortest = ShardStrategy(even_batches=False)
    trainer(out / "shortest", strategy=shortest, max_epochs=1).fit(
        IdRecorder(str(out / "shortest")), _shuffled(data)
    )
    parts = [StreamingDataset(data), StreamingDataset(data, shuffle=True, seed=5)]
    combined = DataLoader(CombinedStreamingDataset(parts, seed=1), batch_size=4)
    trainer(out / "combined", max_epochs=1).fit(IdRecorder(str(out / "combined")), combined)
    run = trainer(out)
    predictions: Any = run.predict(IdRecorder(str(out)), _in_order(data))
    ids = [int(i) for batch in predictions for i in batch]
    (out / f"predict_rank{run.global_rank}.json").write_text(json.dumps(ids))


def resume(data: str, out: Path) -> None:
    """A shuffled stream read by 2 workers per process: uninterrupted for 2 epochs, stopped mid-epoch, and
    resumed from that checkpoint."""
    trainer(out / "full", max_epochs=2).fit(IdRecorder(str(out / "full")), _shuffled(data, workers=2))
    save = ModelCheckpoint(out / "checkpoints", every_n_train_steps=STOP, save_top_k=-1, filename="{step}")
    stop = trainer(out / "stop", max_steps=STOP, callbacks=[save], enable_checkpointing=True)
    stop.fit(IdRecorder(str(out / "stop")), _shuffled(data, workers=2))
    (checkpoint,) = (out / "checkpoints").glob("*.ckpt")
    resumed = trainer(out / "resume", max_epochs=2)
    resumed.fit(IdRecorder(str(out / "resume")), _shuffled(data, workers=2), ckpt_path=str(checkpoint))


STOP = 5
"""The step the stopped run saves at: mid-epoch (each epoch has 7 steps, rank 0's share 6 batches)."""

SCENARIOS = {function.__name__: function for function in (fits, resume)}
RUNS = ("plain", "streaming", "shortest", "combined", "full", "stop", "resume")

if __name__ == "__main__":
    name, data_dir, out_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    for directory in RUNS:
        (out_dir / directory).mkdir(parents=True, exist_ok=True)
    pl.seed_everything(0)
    SCENARIOS[name](data_dir, out_dir)
