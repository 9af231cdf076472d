"""Train on 2 CPU processes with ``ShardStrategy``, stop mid-epoch, resume, and check every sample.

    python examples/train.py        # or: make demo

Phase 1 trains until step 40 (epoch 2 of 2 has started) and stops there, as a preempted job would,
with the checkpoint that ``ModelCheckpoint(every_n_train_steps=40)`` wrote. Phase 2 resumes from that
checkpoint. The script then checks, epoch by epoch, that the two phases together trained on every
sample exactly once, plus only the padding the plan announced.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import lightning.pytorch as pl
import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, os.path.dirname(__file__))

from blobs import BlobsData, Classifier  # noqa: E402

from lightning_shard import ShardStrategy  # noqa: E402

STOP_AFTER = 40
EPOCHS = 2
TRAIN_SIZE = 2000


def trainer(run_dir: Path, stop: bool) -> pl.Trainer:
    checkpoints = ModelCheckpoint(run_dir, every_n_train_steps=STOP_AFTER, save_top_k=-1, filename="{step}")
    return pl.Trainer(
        strategy=ShardStrategy(use_seedable_sampler=True, data_seed=7),
        accelerator="cpu",
        devices=2,
        max_epochs=EPOCHS,
        max_steps=STOP_AFTER if stop else -1,
        callbacks=[checkpoints],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )


def check(phases: list[list[tuple[int, int, list[int]]]], padded: int) -> list[str]:
    """One line per epoch: each sample's count over both phases; raises if any was lost or repeated."""
    lines = []
    for epoch in range(EPOCHS):
        counts = Counter(i for steps in phases for e, _, ids in steps if e == epoch for i in ids)
        missing = TRAIN_SIZE - len(counts)
        repeated = sum(count - 1 for count in counts.values())
        steps = [sorted({b for e, b, _ in steps if e == epoch}) for steps in phases]
        if missing or repeated != padded:
            raise SystemExit(f"epoch {epoch}: {missing} samples lost, {repeated} repeats (expected {padded})")
        split = " + ".join(f"steps {s[0]}-{s[-1]} in phase {p + 1}" for p, s in enumerate(steps) if s)
        lines.append(
            f"epoch {epoch}: {split}; all {TRAIN_SIZE} samples seen, each once, plus the {padded} padding "
            "repeats of the plan"
        )
    return lines


def main() -> None:
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    logging.getLogger("lightning.pytorch.accelerators.cuda").setLevel(logging.WARNING)
    # NOTE: Lightning re-runs this script for process 1; the environment carries the run directory to it.
    run_dir = Path(
        os.environ.setdefault("SHARD_EXAMPLE_DIR", tempfile.mkdtemp(prefix="lightning_shard_demo_"))
    )
    pl.seed_everything(0, verbose=False)

    first = Classifier()
    stopped = trainer(run_dir, stop=True)
    stopped.fit(first, datamodule=BlobsData(train_size=TRAIN_SIZE))
    (checkpoint,) = run_dir.glob("*.ckpt")

    second = Classifier()
    resumed = trainer(run_dir, stop=False)
    resumed.fit(second, datamodule=BlobsData(train_size=TRAIN_SIZE), ckpt_path=checkpoint)

    if resumed.global_rank == 0:
        plan = resumed.strategy.shard_plan
        assert plan is not None and plan.padded_samples is not None
        print(
            f"\nphase 1 stopped after step {STOP_AFTER} and saved {checkpoint.name}; phase 2 resumed from it."
        )
        for epoch, count, accuracy in first.accuracies + second.accuracies:
            print(f"validation after epoch {epoch}: accuracy {accuracy:.3f} over exactly {count} samples")
        for line in check([first.all_seen, second.all_seen], plan.padded_samples):
            print(line)
        print("no sample was lost or repeated across the resume.")
        shutil.rmtree(run_dir, ignore_errors=True)
    # NOTE: Lightning leaves its process group up after `fit` (a later fit reuses it); ending it on every
    # process, together, keeps gloo's threads from being torn down mid-read when the other process exits.
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
