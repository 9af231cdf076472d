"""A real 2-process ``lightning.fabric.Fabric`` run with ``ShardFabricStrategy`` on CPU (gloo), for
``tests/lightning/test_fabric.py``:

    python -m tests.scripts.fabric_run OUT_DIR   (from the repository root)

Fabric starts the second process by running this script again. In the same processes: ``full`` trains
2 epochs; ``stop`` trains the first ``STOP_AT`` steps and saves model, optimizer and loader with
``fabric.save``; ``resume`` loads them with ``fabric.load`` into fresh objects and trains to the end of
epoch 2; ``plain`` runs one epoch of a loader set up with ``use_distributed_sampler=False``. Each
process writes the ids of every step and its final weights. ``uneven`` sets up a loader under
``even_batches=False`` whose processes get different numbers of batches, and reads it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader

from lightning_shard import ShardFabricStrategy
from tests.helpers.lightning_app import loader

LENGTH, BATCH, EPOCHS, STOP_AT = 22, 2, 2, 3
"""22 samples, 2 per process and step: 6 steps per epoch on 2 processes, the last padded with 2."""


def setup(fabric: L.Fabric) -> tuple[Any, Any, DataLoader]:
    L.seed_everything(0)
    model, optimizer = fabric.setup(*_model_and_optimizer())
    return model, optimizer, fabric.setup_dataloaders(loader(LENGTH, BATCH, shuffle=True))


def _model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train(
    fabric: L.Fabric, model: Any, optimizer: Any, data: DataLoader, start_epoch: int = 0, stop_at: int = -1
) -> list[list[Any]]:
    """Train from ``start_epoch`` to ``EPOCHS`` (or for ``stop_at`` steps); the ids of each step."""
    steps: list[list[Any]] = []
    for epoch in range(start_epoch, EPOCHS):
        for batch in data:
            loss = nn.functional.mse_loss(model(batch["x"]), batch["y"])
            optimizer.zero_grad()
            fabric.backward(loss)
            optimizer.step()
            steps.append([epoch, batch["id"].tolist()])
            if len(steps) == stop_at:
                return steps
    return steps


def write(fabric: L.Fabric, out: Path, name: str, steps: list[list[Any]], model: Any) -> None:
    weights = [float(p.detach().double().sum()) for p in model.parameters()]
    record = {"steps": steps, "weights": weights, "world_size": fabric.world_size}
    (out / f"{name}_rank{fabric.global_rank}.json").write_text(json.dumps(record))


def main(out: Path) -> None:
    fabric = L.Fabric(accelerator="cpu", devices=2, strategy=ShardFabricStrategy())
    fabric.launch()
    model, optimizer, data = setup(fabric)
    write(fabric, out, "full", train(fabric, model, optimizer, data), model)

    model, optimizer, data = setup(fabric)
    steps = train(fabric, model, optimizer, data, stop_at=STOP_AT)
    checkpoint = out / "stop.ckpt"
    fabric.save(checkpoint, {"model": model, "optimizer": optimizer, "loader": data, "epoch": 0})
    write(fabric, out, "stop", steps, model)

    L.seed_everything(1)  # NOTE: a fresh start elsewhere: everything that matters comes from the checkpoint.
    model, optimizer = fabric.setup(*_model_and_optimizer())
    data = fabric.setup_dataloaders(loader(LENGTH, BATCH, shuffle=True))
    state = {"model": model, "optimizer": optimizer, "loader": data}
    rest = fabric.load(checkpoint, state)
    write(fabric, out, "resume", train(fabric, model, optimizer, data, start_epoch=rest["epoch"]), model)

    plain = fabric.setup_dataloaders(loader(LENGTH, BATCH), use_distributed_sampler=False)
    write(fabric, out, "plain", [[0, batch["id"].tolist()] for batch in plain], model)

    # NOTE: as a strategy built with `even_batches=False` (exact evaluation): 11 batches, 6 and 5 per process.
    fabric.strategy.options = dataclasses.replace(fabric.strategy.options, even_batches=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        uneven = fabric.setup_dataloaders(loader(LENGTH, BATCH))
    record = {
        "warnings": [str(warning.message) for warning in caught],
        "ids": [b["id"].tolist() for b in uneven],
    }
    (out / f"uneven_rank{fabric.global_rank}.json").write_text(json.dumps(record))
    # NOTE: every rank ends here before any exits: rank 0 (the launcher's process) leaving while rank 1 is
    # still connected aborts now and then in torch's teardown of the gloo group ("terminate called without
    # an active exception", exit 134; about 1 run in 8 of this script, none with this barrier).
    fabric.barrier()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
