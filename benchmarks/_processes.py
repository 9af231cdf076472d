"""Run a benchmark function on real gloo processes (spawned, file rendezvous) and collect the results.

The benchmarks' own small runner: they import nothing from ``tests/``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def _rank(rank: int, fn: Callable[..., Any], world_size: int, init_file: str, args: tuple, out: Any) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        out.put((rank, fn(rank, world_size, *args)))
    finally:
        dist.destroy_process_group()


def on_processes(fn: Callable[..., Any], world_size: int, *args: Any) -> list[Any]:
    """``fn(rank, world_size, *args)`` on ``world_size`` processes; the results in rank order.

    Raises:
        SystemExit: when a process fails (``torch.multiprocessing`` reports it with its traceback).
    """
    context = mp.get_context("spawn")
    out = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        mp.start_processes(
            _rank, (fn, world_size, init_file, args, out), nprocs=world_size, start_method="spawn"
        )
    results = dict(out.get() for _ in range(world_size))
    return [results[rank] for rank in range(world_size)]
