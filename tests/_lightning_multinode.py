"""One node of a 2-node fit, started by ``torchrun`` (see ``test_lightning_multinode.py``):

python -m torch.distributed.run --nnodes 2 --node_rank I ... tests/_lightning_multinode.py OUT_DIR
"""

from __future__ import annotations

import os
import sys

import lightning.pytorch as pl

sys.path.insert(0, os.path.dirname(__file__))

from _lightning_app import Recorder, loader  # noqa: E402

import lightning_shard  # noqa: E402,F401 - registers the "shard" strategies

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
