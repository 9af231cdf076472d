"""Every process's random states, gathered for a checkpoint and given back to each process when it is
resumed on the same number of processes (docs/DESIGN.md, "Random states on resume").

Lightning saves no random state, so a fit resumed mid-epoch reads the same batches but draws other
dropout masks. The reference saves them per process; here process 0 writes them all into its checkpoint.
Every value is a tensor, an int, a float, ``None`` or a list or dict of them, so the saved state loads with
``torch.load(weights_only=True)``. NumPy and CUDA are included where they are present.
"""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.distributed as dist

from lightning_shard.comm.collectives import is_distributed, world_size

VERSION = 1


def capture() -> dict[str, Any]:
    """This process's random states: torch's CPU generator, CUDA's (if initialised), NumPy's, Python's."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": {"version": version, "internal": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = _numpy()
    if numpy is not None:
        kind, keys, position, has_gauss, cached = numpy.random.get_state()
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
    numpy = _numpy()
    if "numpy" in state and numpy is not None:
        saved = state["numpy"]
        keys = saved["keys"].numpy().astype(numpy.uint32)
        numpy.random.set_state(
            (saved["kind"], keys, saved["position"], saved["has_gauss"], saved["cached_gaussian"])
        )


def gather_states() -> dict[str, Any]:
    """Every process's ``capture()``, on process 0 (``{}`` elsewhere); a collective of the default group."""
    own = capture()
    if not is_distributed():
        return {"version": VERSION, "world_size": 1, "states": [own]}
    size, rank = dist.get_world_size(), dist.get_rank()
    states: list[Any] | None = [None] * size if rank == 0 else None
    dist.gather_object(own, states, dst=0)
    return {"version": VERSION, "world_size": size, "states": states} if rank == 0 else {}


def own_state(saved: dict[str, Any]) -> dict[str, Any] | None:
    """This process's state in ``saved`` (``gather_states``), or ``None`` when it was written by another
    number of processes (or holds none)."""
    states = saved.get("states")
    if saved.get("version") != VERSION or saved.get("world_size") != world_size() or not states:
        return None
    return states[dist.get_rank() if is_distributed() else 0]


def random_streams_notice(saved: dict[str, Any]) -> str:
    """What a resume on another number of processes does with the saved random states."""
    return (
        f"lightning_shard: the checkpoint's random states were saved by {saved.get('world_size')} processes, "
        "not by this run's number: each process's random streams (dropout, and any other draw of the model) "
        "start afresh instead of continuing where the checkpoint left them."
    )


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - NumPy comes with torch's usual installs
        return None
    return numpy
