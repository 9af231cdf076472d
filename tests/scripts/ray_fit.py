"""A Ray Train fit on 2 CPU workers, one killed mid-epoch (see ``tests/ray/test_ray.py``):

python -m tests.scripts.ray_fit OUT

The workers run ``tests/scripts/elastic.py``'s recorder under ``RayShardStrategy`` with a checkpoint
reported every step; the first attempt holds after step ``HOLD_AT`` (each worker writes ``OUT/held-<rank>``),
and a thread of this driver then kills worker 1 (SIGKILL). Ray restarts the group once
(``FailureConfig(max_failures=1)``) from the last reported checkpoint.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import ray
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.lightning import prepare_trainer
from ray.train.torch import TorchTrainer

from lightning_shard.ray import RayShardStrategy, ShardReportCallback, restored_checkpoint
from tests.helpers.lightning_app import loader
from tests.scripts.elastic import BATCH, EPOCHS, HOLD_AT, HOLD_BOUND, HOLD_WORLD, LENGTH, ElasticRecorder


def train_func(config: dict[str, Any]) -> None:
    trainer = pl.Trainer(
        accelerator="cpu",
        devices="auto",
        strategy=RayShardStrategy(use_seedable_sampler=True, data_seed=0),
        callbacks=[ShardReportCallback(every_n_train_steps=1)],
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer = prepare_trainer(trainer)
    with restored_checkpoint() as path:
        trainer.fit(
            ElasticRecorder(config["out"], HOLD_AT), loader(LENGTH, BATCH, shuffle=True), ckpt_path=path
        )


def kill_when_held(out: Path) -> None:
    """Once every worker holds, kill worker 1 (its pid is in its file)."""
    held = [out / f"held-{rank}" for rank in range(HOLD_WORLD)]
    deadline = time.monotonic() + HOLD_BOUND
    while not all(path.exists() for path in held):
        if time.monotonic() > deadline:
            return  # NOTE: the workers end themselves after the same bound; the test then fails
        time.sleep(0.1)  # NOTE: polling for the workers' signal, not waiting for time to pass
    print("killing worker 1", flush=True)
    os.kill(int(held[1].read_text()), signal.SIGKILL)


def main() -> None:
    out = Path(sys.argv[1])
    ray.init(num_cpus=HOLD_WORLD, include_dashboard=False)
    threading.Thread(target=kill_when_held, args=(out,), daemon=True).start()
    result = TorchTrainer(
        train_func,
        train_loop_config={"out": str(out)},
        scaling_config=ScalingConfig(num_workers=HOLD_WORLD, use_gpu=False),
        run_config=RunConfig(storage_path=str(out / "ray"), failure_config=FailureConfig(max_failures=1)),
    ).fit()
    print(f"ray fit done: {result.error!r}", flush=True)
    ray.shutdown()
    if result.error is not None:
        sys.exit(1)


if __name__ == "__main__":
    main()
