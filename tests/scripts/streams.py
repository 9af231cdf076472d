"""Real 2-process ``lightning.Trainer`` runs over streams for ``tests/lightning/test_streams.py``:

    python -m tests.scripts.streams SCENARIO OUT_DIR   (from the repository root)

The streams are Hugging Face ``datasets.IterableDataset``s built from local generators, one shard per
range of ids, shards of different lengths (docs/DESIGN.md, "Streaming data"). Each fit records the ids
every process trained on at each step; the tests read them back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor, nn
from torch.utils.data import DataLoader

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard.lightning import ShardStrategy
from tests.helpers.datasets import (
    IdStream,
    LabelledRankSplitStream,
    LateSplitIdStream,
    MaskedTokenStream,
    TaggedRankSplitStream,
)
from tests.helpers.hf import hf_id_stream
from tests.helpers.lightning_app import Recorder, features, trainer

TRAIN_SHARDS = [10, 3, 17, 1, 9]
"""40 ids in 5 shards: process 0 gets shards 0-2 (30 ids), process 1 shards 3-4 (10 ids)."""
VAL_SHARDS = [5, 2, 9, 3]
"""19 ids in 4 shards: process 0 gets 7 ids, process 1 gets 12."""


class StreamRecorder(Recorder):
    """``Recorder`` for batches that hold only ids (the features are computed from them)."""

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        ids = batch["id"]
        self.records["train"].append([self.current_epoch, batch_idx, ids.tolist()])
        x = torch.stack([features(int(index)) for index in ids])
        return nn.functional.mse_loss(self.layer(x), x.sum(dim=1, keepdim=True))

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> Tensor:
        return batch["id"]


def _ids(lengths: list[int], batch_size: int = 4, **kwargs: Any) -> DataLoader:
    return DataLoader(hf_id_stream(lengths), batch_size=batch_size, **kwargs)


def _predict(out: Path, loaders: dict[str, DataLoader]) -> None:
    """Predict over several loaders in one run; each process writes the ids it predicted, per loader."""
    run = trainer(out)
    predictions: Any = run.predict(StreamRecorder(str(out)), list(loaders.values()))
    for name, batches in zip(loaders, predictions, strict=True):
        ids = [int(i) for batch in batches for i in batch]
        (out / f"{name}_rank{run.global_rank}.json").write_text(json.dumps(ids))


def uneven(out: Path) -> None:
    """Padding (training and validation), stopping at the shortest, and predict, native and strided."""
    pad = out / "pad"
    model = StreamRecorder(str(pad))
    trainer(pad, max_epochs=1).fit(model, _ids(TRAIN_SHARDS), _ids(VAL_SHARDS))
    shortest = out / "shortest"
    strategy = ShardStrategy(even_batches=False)
    trainer(shortest, strategy=strategy, max_epochs=1).fit(StreamRecorder(str(shortest)), _ids(TRAIN_SHARDS))
    fewer = out / "fewer"  # one shard for 2 processes: strided, every sample once per epoch (plus padding)
    fewer.mkdir(exist_ok=True)
    trainer(fewer, max_epochs=1).fit(
        StreamRecorder(str(fewer)), _ids([13], num_workers=2, persistent_workers=False)
    )
    strided = DataLoader(IdStream(37), batch_size=4, collate_fn=_as_ids)
    _predict(out, {"predict_native": _ids(VAL_SHARDS, batch_size=3), "predict_strided": strided})


def _as_ids(batch: list[int]) -> dict[str, Tensor]:
    return {"id": torch.tensor(batch)}


def _shuffled(workers: int = 2) -> DataLoader:
    data = hf_id_stream(TRAIN_SHARDS).shuffle(seed=7, buffer_size=4)
    return DataLoader(data, batch_size=4, num_workers=workers, persistent_workers=False)


def resume(out: Path) -> None:
    """A shuffled stream read by 2 workers per process: uninterrupted, stopped mid-epoch while process 1
    pads, and resumed from that checkpoint, with 2 workers and with none."""
    pl.seed_everything(0)
    trainer(out / "full", max_epochs=2).fit(StreamRecorder(str(out / "full")), _shuffled())
    save = ModelCheckpoint(out / "checkpoints", every_n_train_steps=6, save_top_k=-1, filename="{step}")
    stop = trainer(out / "stop", max_steps=6, callbacks=[save], enable_checkpointing=True)
    stop.fit(StreamRecorder(str(out / "stop")), _shuffled())
    (checkpoint,) = (out / "checkpoints").glob("*.ckpt")
    resumed = trainer(out / "resume2", max_epochs=2)
    resumed.fit(StreamRecorder(str(out / "resume2")), _shuffled(), ckpt_path=str(checkpoint))
    without = trainer(out / "resume0", max_epochs=2)
    without.fit(StreamRecorder(str(out / "resume0")), _shuffled(workers=0), ckpt_path=str(checkpoint))


class AnyBatchRecorder(pl.LightningModule):
    """Trains on the float features of any batch (a tuple's first tensor, ``emb`` or ``pos`` of a dict, ids as
    floats) and records the ids it trained on (the features are the ids) and each optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(1, 1)
        self.trained: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        if isinstance(batch, dict):
            x = batch["emb"] if "emb" in batch else batch["pos"]
        else:
            x = batch[0] if isinstance(batch, (list, tuple)) else batch.float().reshape(-1, 1)
        self.trained += [int(value) for value in x.flatten()]
        return self.layer(x).square().mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def unsaid_split(out: Path) -> None:
    """Streams that split themselves by rank without saying so, behind a shared label, a shared tag, or after
    their first global batch (0.4.0 trained half of each, exit 0), and a same stream masked at random (0.4.0
    refused it): each process records its error, its optimizer steps and the ids it trained."""
    fits = {
        "labelled": DataLoader(LabelledRankSplitStream(96), batch_size=4),
        "tagged": DataLoader(
            TaggedRankSplitStream(96), batch_size=4, num_workers=2, persistent_workers=False
        ),
        "late": DataLoader(LateSplitIdStream(96, head=8), batch_size=4),
        "masked": DataLoader(MaskedTokenStream(96), batch_size=4),
    }
    for name, data in fits.items():
        model, run = AnyBatchRecorder(), trainer(out, max_epochs=1)
        try:
            run.fit(model, data)
            error = None
        except RuntimeError as failure:
            error = str(failure)
        record = {"error": error, "global_step": run.global_step, "trained": model.trained}
        (out / f"{name}_rank{run.global_rank}.json").write_text(json.dumps(record))


SCENARIOS = {function.__name__: function for function in (uneven, resume, unsaid_split)}

if __name__ == "__main__":
    name, out_dir = sys.argv[1], Path(sys.argv[2])
    for directory in ("", "pad", "shortest", "full", "stop", "resume2", "resume0"):
        (out_dir / directory).mkdir(parents=True, exist_ok=True)
    pl.seed_everything(0)
    SCENARIOS[name](out_dir)
