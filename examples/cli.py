"""``LightningCLI`` with ``ShardStrategy`` configured in YAML (``class_path`` / ``init_args``).

python examples/cli.py fit --config examples/cli_config.yaml
python examples/cli.py fit --config examples/cli_config.yaml --trainer.strategy.init_args.split_batches=true
"""

from __future__ import annotations

import os
import sys

from lightning.pytorch.cli import LightningCLI

sys.path.insert(0, os.path.dirname(__file__))

from blobs import BlobsData, Classifier  # noqa: E402

import lightning_shard  # noqa: E402,F401 - makes `lightning_shard.ShardStrategy` resolvable


def main() -> None:
    LightningCLI(Classifier, BlobsData, save_config_callback=None)


if __name__ == "__main__":
    main()
