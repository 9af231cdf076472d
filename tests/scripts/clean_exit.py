"""One small fit whose every process must exit when it ends, for ``tests/lightning/test_clean_exit.py``:

    python -m tests.scripts.clean_exit LOOP DATA DEVICES PHASE OUT_DIR   (from the repository root)

``LOOP``: ``fabric`` (``ShardFabricStrategy``, a Fabric loop) or ``trainer`` (``ShardStrategy``,
``Trainer.fit``). ``DATA``: ``map`` (a shuffled map-style dataset) or ``stream`` (a stream its workers
split: the stream end agreement runs at every fetch), read by 2 ``DataLoader`` workers. ``PHASE``: ``stop``
trains ``STOP_AT`` steps and saves everything (``fabric.save``, a ``ModelCheckpoint``); ``resume``, a new
launch, loads that save and trains to the end of the epoch. Each process writes the ids of the steps it
trained (``PHASE_rankR.json``).

The script ends as users' scripts do. ``stop`` calls ``dist.destroy_process_group()`` itself while its
model is still alive (freed when ``main`` returns): the order in which plain DDP's gloo group can be freed
by DDP's reducer, holding the GIL, and hang (docs/DESIGN.md, "No hangs"). ``resume`` leaves the group to
the strategy. A Fabric loop takes one backward more after its record, right before its end; with
``LIGHTNING_SHARD_TEST_IDLE_GLOO=1`` the race at the end is forced there (``tests/helpers/idle_gloo.py``;
after the fit for a ``Trainer``, which has already let DDP go).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader

from lightning_shard import ShardFabricStrategy, ShardStrategy
from tests.helpers.idle_gloo import idle_gloo_if_asked
from tests.helpers.lightning_app import Recorder, RecordMap, WorkerSplitRecordStream, trainer

LENGTH, BATCH, STOP_AT = 36, 2, 3
"""36 samples, 2 per process and step: 9 steps an epoch on 2 processes, 6 on 3; ``stop`` saves after 3."""
WORKERS = {"num_workers": 2, "multiprocessing_context": "fork"}


def data(kind: str) -> DataLoader:
    if kind == "map":
        return DataLoader(RecordMap(LENGTH), batch_size=BATCH, shuffle=True, **WORKERS)
    return DataLoader(WorkerSplitRecordStream(LENGTH), batch_size=BATCH, **WORKERS)


def fabric_fit(kind: str, devices: int, phase: str, out: Path) -> None:
    fabric = L.Fabric(accelerator="cpu", devices=devices, strategy=ShardFabricStrategy())
    fabric.launch()
    L.seed_everything(0)
    layer = nn.Linear(4, 1)
    model, optimizer = fabric.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    loader = fabric.setup_dataloaders(data(kind))
    state = {"model": model, "optimizer": optimizer, "loader": loader}
    if phase == "resume":
        fabric.load(out / "fabric.ckpt", state)
    steps: list[list[int]] = []
    for batch in loader:
        optimizer.zero_grad()
        fabric.backward(nn.functional.mse_loss(model(batch["x"]), batch["y"]))
        optimizer.step()
        steps.append(batch["id"].tolist())
        if phase == "stop" and len(steps) == STOP_AT:
            fabric.save(out / "fabric.ckpt", state)
            break
    _write(out, phase, fabric.global_rank, steps)
    idle_gloo_if_asked()
    # NOTE: a backward more, then the end: nothing waits between DDP's last all-reduce and the end (the loader's
    # workers, which the loop's end waits for, are gone already). `stop` destroys the group first, under its
    # live model; `resume` leaves it to the strategy.
    fabric.backward(nn.functional.mse_loss(model(batch["x"]), batch["y"]))
    if phase == "stop":
        dist.destroy_process_group()


def trainer_fit(kind: str, devices: int, phase: str, out: Path) -> None:
    checkpoints = out / "checkpoints"
    if phase == "stop":
        save = ModelCheckpoint(checkpoints, every_n_train_steps=STOP_AT, filename="stop")
        settings: dict[str, Any] = {"max_steps": STOP_AT, "callbacks": [save], "enable_checkpointing": True}
    else:
        settings = {"max_epochs": 1}
    fit = trainer(out, ShardStrategy(), devices, **settings)
    module = _StepIds(str(out))
    fit.fit(module, data(kind), ckpt_path=checkpoints / "stop.ckpt" if phase == "resume" else None)
    _write(out, phase, fit.global_rank, [ids for *_, ids in module.records["train"]])
    idle_gloo_if_asked()
    if phase == "stop":
        dist.destroy_process_group()


class _StepIds(Recorder):
    def on_fit_end(self) -> None:
        """Nothing to dump: ``trainer_fit`` writes the ids once the fit has returned."""


def _write(out: Path, phase: str, rank: int, steps: list[Any]) -> None:
    (out / f"{phase}_rank{rank}.json").write_text(json.dumps(steps))


def main(loop: str, kind: str, devices: int, phase: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    run = fabric_fit if loop == "fabric" else trainer_fit
    run(kind, devices, phase, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], Path(sys.argv[5]))
