"""One launch of the multi-machine guide's ``ray_train.py`` (``tests/ray/test_guide.py``):

    python -m tests.scripts.ray_guide PAGE_DIR WORKERS [ARGUMENTS...]

runs ``PAGE_DIR/ray_train.py --workers WORKERS ARGUMENTS`` from ``PAGE_DIR`` as its own ``__main__``, on a
Ray instance of this launch with one CPU per worker, as a cluster of that size would be: the script's
``TorchTrainer`` would otherwise start one with this machine's CPUs (2), too few for 3 workers.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import ray

from tests.helpers.runner import ROOT


def main() -> None:
    where, workers, arguments = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    os.chdir(where)
    # NOTE: before `ray.init`: the workers Ray starts inherit it, and import `train` (the page's model) and
    # the checkout's `lightning_shard` as the script does.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(where), str(ROOT), os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, str(where))
    ray.init(num_cpus=workers, include_dashboard=False)
    sys.argv = ["ray_train.py", "--workers", str(workers), *arguments]
    try:
        runpy.run_path("ray_train.py", run_name="__main__")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
