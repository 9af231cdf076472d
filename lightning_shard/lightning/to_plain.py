"""Write a checkpoint saved under a ``Shard*`` strategy as one plain Lightning resumes from:

    python -m lightning_shard.lightning.to_plain SOURCE DESTINATION [--no-weights-only]

What is kept and what is lost: ``to_plain_checkpoint`` (``lightning/plain_checkpoint.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from lightning_shard.lightning.plain_checkpoint import to_plain_checkpoint


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m lightning_shard.lightning.to_plain SOURCE DESTINATION [--no-weights-only]``."""
    parser = argparse.ArgumentParser(
        prog="python -m lightning_shard.lightning.to_plain",
        description="Write a checkpoint saved under a lightning_shard strategy as one plain Lightning "
        "resumes from (the loaders' exact position and our callbacks' states removed).",
    )
    parser.add_argument("source", help="the checkpoint file")
    parser.add_argument("destination", help="where to write the plain checkpoint (may be SOURCE)")
    parser.add_argument(
        "--no-weights-only",
        dest="weights_only",
        action="store_false",
        help="load with torch.load(weights_only=False): only for a checkpoint you trust",
    )
    arguments = parser.parse_args(argv)
    removed = to_plain_checkpoint(
        arguments.source, arguments.destination, weights_only=arguments.weights_only
    )
    print(f"Wrote {arguments.destination}: a plain Lightning checkpoint.")
    print("Removed: " + ("; ".join(removed) if removed else "nothing (no lightning_shard state found)") + ".")


if __name__ == "__main__":
    main()
