"""Fits with the user's own sampler and with the model's own randomness, for
``tests/lightning/test_own_sampler.py``, one phase per call:

    python -m tests.scripts.own_sampler PHASE OUT_DIR   (from the repository root)

``two`` (2 processes, ``ShardStrategy``): for each sampler of ``tests/helpers/samplers.py`` and
``WeightedRandomSampler`` without a generator, an uninterrupted fit that checkpoints in epoch 1, and that
checkpoint resumed; then a model with dropout over data augmented in the main process (``num_workers=0``,
torch's global RNG), uninterrupted with a checkpoint mid-epoch, and resumed; and that model with
``accumulate_grad_batches=3``, resumed from an optimizer step and from the middle of a window. ``one`` (1 process):
the samplers' uninterrupted fits. ``three`` (3 processes): the dropout fits. ``model_parallel`` (2 processes, data
parallel 2, FSDP2): the dropout fits with ``ShardModelParallelStrategy``, writing one checkpoint file, then a
checkpoint directory. ``fabric`` (2 processes): the dropout run with
``ShardFabricStrategy``, saved and loaded through ``fabric.save`` / ``fabric.load``. Each uninterrupted
run writes the checkpoint its resumed run starts from, at the step a killed run would have left it. Each fit records the
ids of every step and its final weights, exactly (``float.hex``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning as L
import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard import ShardFabricStrategy, ShardModelParallelStrategy
from tests.helpers.lightning_app import Recorder, RecordMap, features, trainer
from tests.helpers.samplers import Buckets, Evens, GlobalPermutation, MaxTokens

LENGTH, BATCH = 50, 4
SAMPLERS = ("bucketing", "max_tokens", "filtering", "weighted", "global_rng")
STOP = {"bucketing": 10, "max_tokens": 9, "filtering": 6, "weighted": 9, "global_rng": 9}
"""Steps after which each stopped fit checkpoints: two or three steps into epoch 1 on 2 processes."""
DROPOUT_STOP = 5


def sampler_loader(kind: str) -> DataLoader:
    data = RecordMap(LENGTH)
    if kind == "bucketing":
        return DataLoader(data, batch_sampler=Buckets(LENGTH, BATCH, bucket=10))
    if kind == "max_tokens":
        return DataLoader(data, batch_sampler=MaxTokens(LENGTH))
    if kind == "filtering":
        return DataLoader(data, sampler=Evens(data), batch_size=BATCH)
    if kind == "weighted":
        weights = [1.0 + (index % 3) for index in range(LENGTH)]
        return DataLoader(
            data, sampler=WeightedRandomSampler(weights, LENGTH, replacement=True), batch_size=BATCH
        )
    return DataLoader(data, sampler=GlobalPermutation(LENGTH), batch_size=BATCH)


class Exact(Recorder):
    """``Recorder`` that also writes its final weights exactly and the length Lightning measured."""

    def on_train_epoch_start(self) -> None:
        self.records.setdefault("lengths", []).append(self.trainer.num_training_batches)

    def on_fit_end(self) -> None:
        self.records["weights"] = [value.hex() for p in self.parameters() for value in _values(p)]
        super().on_fit_end()


def _values(parameter: Tensor) -> list[float]:
    local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
    return [float(value) for value in local.detach().double().flatten().tolist()]


def _dir(out: Path, name: str) -> Path:
    path = out / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _saving(checkpoints: Path, every: int) -> dict[str, Any]:
    """Trainer settings that write a checkpoint every ``every`` steps (the uninterrupted fit writes the one
    the resumed fit starts from: what a fit killed after that step would have left)."""
    save = ModelCheckpoint(checkpoints, every_n_train_steps=every, save_top_k=-1, filename="{step}")
    return {"callbacks": [save], "enable_checkpointing": True}


def sampler_fits(out: Path, kind: str, devices: int) -> None:
    """The uninterrupted fit; on 2 processes it checkpoints, and that checkpoint is resumed."""
    full, checkpoints = _dir(out, f"{kind}/full{devices}"), out / kind / "checkpoints"
    pl.seed_everything(0)
    saving = _saving(checkpoints, STOP[kind]) if devices == 2 else {}
    trainer(full, devices=devices, max_epochs=2, **saving).fit(Exact(str(full)), sampler_loader(kind))
    if devices == 1:
        return
    resume = _dir(out, f"{kind}/resume")
    pl.seed_everything(1)  # NOTE: nothing but the checkpoint may carry the order
    checkpoint = checkpoints / f"step={STOP[kind]}.ckpt"
    trainer(resume, max_epochs=2).fit(Exact(str(resume)), sampler_loader(kind), ckpt_path=str(checkpoint))


# -- the model's own randomness ---------------------------------------------------------------------
class Augmented(Dataset):
    """``RecordMap`` with noise from torch's global RNG added to every sample, in the process that loads."""

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> dict[str, Any]:
        x = features(index) + 0.1 * torch.randn(4)
        return {"id": index, "x": x, "y": x.sum(0, keepdim=True)}


def augmented_loader() -> DataLoader:
    return DataLoader(Augmented(), batch_size=BATCH, shuffle=True)


class Dropout(Exact):
    """Two layers with dropout between them, momentum SGD."""

    def __init__(self, out_dir: str) -> None:
        super().__init__(out_dir)
        del self.layer  # NOTE: unused here; DDP refuses parameters that get no gradient
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 1))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        self.records["train"].append([self.current_epoch, batch_idx, batch["id"].tolist()])
        return nn.functional.mse_loss(self.net(batch["x"]), batch["y"])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)


class ShardedDropout(Dropout):
    """``Dropout`` sharded with FSDP2 over the data-parallel mesh dimension."""

    def configure_model(self) -> None:
        from torch.distributed.fsdp import fully_shard

        fully_shard(self.net, mesh=self.device_mesh["data_parallel"])


def dropout_fits(
    out: Path, name: str, make_strategy: Any, model: type[Dropout], devices: int = 2, stop: int = DROPOUT_STOP
) -> None:
    """Uninterrupted (checkpointed after ``stop`` steps, mid-epoch 0) and resumed: 2 epochs."""
    full, checkpoints = _dir(out, f"{name}/full"), out / name / "checkpoints"
    pl.seed_everything(0)
    trainer(full, make_strategy(), devices, max_epochs=2, **_saving(checkpoints, stop)).fit(
        model(str(full)), augmented_loader()
    )
    resume = _dir(out, f"{name}/resume")
    checkpoint = checkpoints / f"step={stop}.ckpt"
    pl.seed_everything(1)
    trainer(resume, make_strategy(), devices, max_epochs=2).fit(
        model(str(resume)), augmented_loader(), ckpt_path=str(checkpoint)
    )


ACCUMULATE, MID_WINDOW = 3, 4
"""``accumulate_fits``: 7 batches an epoch on 2 processes, summed in windows of 3 (0-2, 3-5, 6); the
mid-window checkpoint is written after batch 4, between the optimizer steps of batches 2 and 5."""


class _MidWindow(Checkpoint):
    """Writes ``path`` after batch ``MID_WINDOW`` of epoch 0, while a gradient is accumulated."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.current_epoch == 0 and batch_idx == MID_WINDOW:
            trainer.save_checkpoint(self.path)


def accumulate_fits(out: Path) -> None:
    """The dropout fit with ``accumulate_grad_batches=3``, uninterrupted, writing a checkpoint at its second
    optimizer step (``step=2.ckpt``, after batch 5) and one mid-window (``mid.ckpt``); each resumed."""
    full, checkpoints = _dir(out, "accumulate/full"), out / "accumulate" / "checkpoints"
    settings = _saving(checkpoints, 2)
    settings["callbacks"].append(_MidWindow(checkpoints / "mid.ckpt"))
    pl.seed_everything(0)
    trainer(full, max_epochs=2, accumulate_grad_batches=ACCUMULATE, **settings).fit(
        Dropout(str(full)), augmented_loader()
    )
    for kind, name in (("at_step", "step=2.ckpt"), ("mid_window", "mid.ckpt")):
        resume = _dir(out, f"accumulate/resume_{kind}")
        pl.seed_everything(1)
        trainer(resume, max_epochs=2, accumulate_grad_batches=ACCUMULATE).fit(
            Dropout(str(resume)), augmented_loader(), ckpt_path=str(checkpoints / name)
        )


def fabric_dropout(out: Path) -> None:
    """The dropout run in a Fabric loop: uninterrupted, stopped after ``DROPOUT_STOP`` steps, resumed."""
    fabric = L.Fabric(accelerator="cpu", devices=2, strategy=ShardFabricStrategy())
    fabric.launch()
    run = _dir(out, "fabric")

    def setup(seed: int) -> tuple[Any, Any, Any]:
        L.seed_everything(seed)
        net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 1))
        model, optimizer = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9))
        return model, optimizer, fabric.setup_dataloaders(augmented_loader())

    def train(model: Any, optimizer: Any, data: Any, start: int, save_at: int | None) -> list[Any]:
        steps: list[Any] = []
        for epoch in range(start, 2):
            for batch in data:
                loss = nn.functional.mse_loss(model(batch["x"]), batch["y"])
                optimizer.zero_grad()
                fabric.backward(loss)
                optimizer.step()
                steps.append([epoch, batch["id"].tolist()])
                if len(steps) == save_at:
                    state = {"model": model, "optimizer": optimizer, "loader": data, "epoch": epoch}
                    fabric.save(run / "stop.ckpt", state)
        return steps

    def write(name: str, model: Any, steps: list[Any]) -> None:
        weights = [value.hex() for p in model.parameters() for value in _values(p)]
        record = {"train": steps, "weights": weights}
        (run / f"{name}_rank{fabric.global_rank}.json").write_text(json.dumps(record))

    model, optimizer, data = setup(0)
    write("full", model, train(model, optimizer, data, 0, DROPOUT_STOP))
    model, optimizer, data = setup(1)
    rest = fabric.load(run / "stop.ckpt", {"model": model, "optimizer": optimizer, "loader": data})
    write("resume", model, train(model, optimizer, data, rest["epoch"], None))
    fabric.barrier()  # NOTE: every rank ends here before any exits (tests/scripts/fabric_run.py).


def _model_parallel(distributed_checkpoint: bool = False) -> ShardModelParallelStrategy:
    return ShardModelParallelStrategy(
        data_parallel_size=2, tensor_parallel_size=1, save_distributed_checkpoint=distributed_checkpoint
    )


def main(phase: str, out: Path) -> None:
    if phase == "two":
        for kind in SAMPLERS:
            sampler_fits(out, kind, 2)
        dropout_fits(out, "ddp", lambda: "shard", Dropout)
        accumulate_fits(out)
    elif phase == "three":
        dropout_fits(out, "ddp3", lambda: "shard", Dropout, devices=3, stop=3)
    elif phase == "one":
        for kind in SAMPLERS:
            sampler_fits(out, kind, 1)
    elif phase == "model_parallel":
        dropout_fits(out, "model_parallel", _model_parallel, ShardedDropout)
        dropout_fits(out, "model_parallel_dcp", lambda: _model_parallel(True), ShardedDropout)
    elif phase == "fabric":
        fabric_dropout(out)
    else:
        raise SystemExit(f"unknown phase {phase!r}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
