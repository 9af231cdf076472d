"""One node of a 2-node fit, started by ``torchrun`` (see ``tests/lightning/test_multinode.py``):

python -m torch.distributed.run --nnodes 2 --node_rank I ... -m tests.scripts.multinode OUT_DIR
"""

from __future__ import annotations

import sys

import lightning.pytorch as pl

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from tests.helpers.lightning_app import Recorder, loader

if __name__ == "__main__":
    out_dir = sys.argv[1]
    pl.seed_everything(0)
    trainer = pl.Trainer(
        num_nodes=2,
        devices=1,
        strategy="shard",
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Recorder(out_dir, scheduler="lambda"), loader(30, 4, shuffle=True))
