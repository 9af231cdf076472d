"""One shared helper to run a function on real gloo process groups in fresh processes.

Each rank runs ``fn(rank, world_size, *args)`` inside an initialised gloo group (file rendezvous, so no
port can clash), the group destroyed in ``finally``. Results come back in rank order; a failure on any
rank raises with that rank's traceback; when no rank finished or reported progress (``progress()``) for
``timeout`` seconds, every rank and what it started (``DataLoader`` workers) is killed and the call fails
with each one's Python stack (``py-spy``),
so a hang can never stall the suite, while a run of many scenarios that reports each one may take as
long as a loaded machine needs.

NOTE: the ranks are started by a fork server that has already imported torch and lightning_shard (with
Lightning), so each rank starts in milliseconds instead of re-importing them (about 4 s of CPU each).
"""

from __future__ import annotations

import os
import pickle
import queue
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

from tests.helpers.reaper import descendants, kill_tree, stacks

_PRELOAD = ["torch", "torch.distributed", "lightning_shard", "tests.helpers.dist"]
_PROGRESS: Any = None
"""In a rank: the queue its results go to, on which ``progress`` reports too."""


def progress(label: str) -> None:
    """In a rank of ``run_distributed``: say that ``label`` (a scenario) finished; it resets the bound."""
    if _PROGRESS is not None:
        _PROGRESS.put((dist.get_rank(), None, label))


def _worker(
    fn: Callable[..., Any], rank: int, world_size: int, init_file: str, args: tuple, out: Any, backend: str
) -> None:
    global _PROGRESS
    os.environ["OMP_NUM_THREADS"] = "1"
    _PROGRESS = out
    import torch

    torch.set_num_threads(1)
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)  # NOTE: NCCL binds each rank to its own GPU (`tests/cuda/` only).
        dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world_size)
        try:
            # NOTE: pickled here, by value: a tensor put as it is travels as a file descriptor that the
            # parent fetches from this process, which may have exited by then ("connection reset").
            out.put((rank, True, pickle.dumps(fn(rank, world_size, *args))))
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the parent with its traceback
        out.put((rank, False, traceback.format_exc()))


def run_distributed(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 120.0,
    daemon: bool = True,
    backend: str = "gloo",
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo processes; return results by rank.

    ``timeout`` bounds the silence, not the run: it restarts whenever a rank reports ``progress``.
    ``daemon=False`` lets ``fn`` start processes of its own (``DataLoader`` workers); the ranks and their
    descendants are still killed on failure or timeout. ``backend="nccl"`` puts rank ``r`` on GPU ``r``.
    """
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        procs = [
            ctx.Process(
                target=_worker, args=(fn, rank, world_size, init_file, args, out, backend), daemon=daemon
            )
            for rank in range(world_size)
        ]
        for proc in procs:
            proc.start()
        results: dict[int, Any] = {}
        failures: list[str] = []
        reported: list[str] = []
        try:
            while len(results) < world_size:
                rank, ok, value = out.get(timeout=timeout)
                if ok is None:
                    reported.append(f"{rank}:{value}")
                elif ok:
                    results[rank] = pickle.loads(value)
                else:
                    failures.append(f"rank {rank}:\n{value}")
                    break
        except queue.Empty:
            hung = [
                pid for proc in procs if proc.pid is not None for pid in [proc.pid, *descendants(proc.pid)]
            ]
            failures.append(
                f"no progress for {timeout}s; finished ranks: {sorted(results)}; last reports: {reported[-4:]}"
                f"\nwhere each process was:\n{stacks(hung)[-20000:]}"
            )
        finally:
            for proc in procs:
                proc.join(timeout=5 if not failures else 0.5)
                if proc.is_alive():
                    kill_tree(proc.pid)  # NOTE: its DataLoader workers too: a hung one would outlive it
                    proc.join()
    if failures:
        raise RuntimeError("distributed run failed:\n" + "\n".join(failures))
    return [results[rank] for rank in range(world_size)]
