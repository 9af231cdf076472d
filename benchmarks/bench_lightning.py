"""Lightning benchmark (issue 4): wall time of a training epoch, ``ShardStrategy`` against ``DDPStrategy``.

Both fit the example task (``examples/blobs.py``: an MLP on generated blobs, shuffled, batch size 32,
AdamW with a per-step ``LambdaLR``) on 2 CPU processes with gloo; ``DDPStrategy`` with Lightning's
``DistributedSampler``, ``ShardStrategy`` with our sharding, ``ShardOptimizer`` and ``ShardScheduler``. Each fit runs in its own pair of
processes; the runs alternate between the two strategies; an epoch is timed on process 0 from
``on_train_epoch_start`` to ``on_train_epoch_end`` and the first epoch (warm-up) is left out. Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_lightning.py [--repeats 3] [--epochs 4] [--train-size 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.strategies import DDPStrategy

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

import torch  # noqa: E402
from blobs import Blobs, Classifier  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from lightning_shard import ShardStrategy  # noqa: E402

KINDS = ("ddp", "shard")


class BenchClassifier(Classifier):
    """The example's classifier with a schedule that needs no datamodule (DDP has none to size it)."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams["lr"])
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step / 100))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class EpochTimer(pl.Callback):
    """Seconds of each training epoch, measured on process 0."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.seconds.append(time.perf_counter() - self._start)


def fit(kind: str, epochs: int, train_size: int, out: Path) -> None:
    """One fit with strategy ``kind``; process 0 writes its epoch times to ``out``."""
    warnings.filterwarnings("ignore")
    strategy: Any = ShardStrategy() if kind == "shard" else DDPStrategy()
    timer = EpochTimer()
    trainer = pl.Trainer(
        strategy=strategy,
        accelerator="cpu",
        devices=2,
        max_epochs=epochs,
        limit_val_batches=0,
        callbacks=[timer],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    pl.seed_everything(0, verbose=False)
    data = DataLoader(Blobs(train_size), batch_size=32, shuffle=True)
    trainer.fit(BenchClassifier(), data)
    if trainer.global_rank == 0:
        out.write_text(json.dumps(timer.seconds))


def _run(kind: str, arguments: argparse.Namespace, out: Path) -> list[float]:
    command = [sys.executable, __file__, "--fit", kind, "--out", str(out)]
    command += ["--epochs", str(arguments.epochs), "--train-size", str(arguments.train_size)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())[1:]


def compare(arguments: argparse.Namespace) -> None:
    epochs: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(arguments.repeats):
            for kind in KINDS if repeat % 2 == 0 else KINDS[::-1]:
                epochs[kind] += _run(kind, arguments, Path(tmp) / f"{kind}{repeat}.json")
    steps = -(-arguments.train_size // 64)
    print(f"epoch of {arguments.train_size} samples, {steps} steps of 2 x 32, 2 CPU processes (gloo):")
    print("| strategy | best epoch (s) | median epoch (s) | epochs timed |")
    print("|---|---:|---:|---:|")
    for kind in KINDS:
        times = epochs[kind]
        print(f"| {kind} | {min(times):.3f} | {statistics.median(times):.3f} | {len(times)} |")
    best = min(epochs["shard"]) / min(epochs["ddp"])
    median = statistics.median(epochs["shard"]) / statistics.median(epochs["ddp"])
    verdict = "met" if best <= 1.05 else "MISSED"
    print(f"ratio shard / ddp: {best:.3f}x best, {median:.3f}x median (target <= 1.05x, {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--train-size", type=int, default=20_000)
    parser.add_argument("--fit", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.fit:
        fit(arguments.fit, arguments.epochs, arguments.train_size, arguments.out)
    else:
        compare(arguments)


if __name__ == "__main__":
    main()
