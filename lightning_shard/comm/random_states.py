"""Each process's random states (torch's, CUDA's where initialised, NumPy's, Python's), saved by that process
with a checkpoint and given back to it when the run resumes on the same number of processes (docs/DESIGN.md,
"Random states on resume"). Every value is a tensor or plain data: they load with ``weights_only=True``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy
import torch

from lightning_shard.comm.collectives import global_rank, world_size

GATHERED = 1
"""0.3.0's format, still read: ``{"version", "world_size", "states"}``, every process's states in rank order."""
PER_PROCESS = 2
"""The format saved: ``{"version", "world_size", "rank", "state"}``, one process's states."""


def capture() -> dict[str, Any]:
    """This process's random states: torch's CPU generator, CUDA's (if initialised), NumPy's, Python's."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": {"version": version, "internal": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    legacy: Any = numpy.random.get_state()  # NOTE: typed as a union with the dict form `legacy=False` gives.
    kind, keys, position, has_gauss, cached = legacy
    state["numpy"] = {
        "kind": str(kind),
        "keys": torch.from_numpy(keys.astype(numpy.int64)),
        "position": int(position),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }
    return state


def restore(state: dict[str, Any]) -> None:
    """Set this process's random states to ``state`` (from ``capture``)."""
    torch.set_rng_state(state["torch"])
    python = state["python"]
    random.setstate((python["version"], tuple(python["internal"].tolist()), python["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        saved = state["numpy"]
        keys = saved["keys"].numpy().astype(numpy.uint32)
        numpy.random.set_state(
            (saved["kind"], keys, saved["position"], saved["has_gauss"], saved["cached_gaussian"])
        )


def own_part() -> dict[str, Any]:
    """This process's ``capture()``, labelled with its rank and the number of processes: what it saves."""
    return {"version": PER_PROCESS, "world_size": world_size(), "rank": global_rank(), "state": capture()}


def own_state(saved: dict[str, Any]) -> dict[str, Any] | None:
    """This process's states in ``saved`` (an ``own_part`` or 0.3.0's gathered states), or ``None`` when
    they are another process's or were saved by another number of processes."""
    if saved.get("world_size") != world_size():
        return None
    if saved.get("version") == GATHERED and saved.get("states"):
        return saved["states"][global_rank()]
    if saved.get("version") == PER_PROCESS and saved.get("rank") == global_rank():
        return saved.get("state")
    return None


def resume_notice(saved: dict[str, Any]) -> str | None:
    """What a resume does with random states saved by another number of processes (``None`` otherwise)."""
    if not saved or saved.get("world_size") == world_size():
        return None
    return (
        f"lightning_shard: the checkpoint's random states were saved by {saved.get('world_size')} processes, "
        "not by this run's number: each process's random streams (dropout, and any other draw of the model) "
        "start afresh instead of continuing where the checkpoint left them."
    )
