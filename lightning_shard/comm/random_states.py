"""Random number generators' states, across processes.

Each process's random states (torch's, CUDA's where initialised, NumPy's, Python's), saved by that process
with a checkpoint and given back to it when the run resumes on the same number of processes (docs/DESIGN.md,
"Random states on resume"). Every value is a tensor or plain data: they load with ``weights_only=True``.

And the generators synchronised from process 0 at the start of each epoch: only the sampler's (or iterable
dataset's) generator and the global generators named in ``rng_types``; DataLoader workers keep their own seeds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

import numpy
import torch

from lightning_shard.comm.collectives import broadcast_object, global_rank, world_size

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


# -- synchronised from process 0 at each epoch ---------------------------------------------------------
RNG_TYPES = ("torch", "cuda", "generator")


def rng_names(rng_types: str | Enum | Iterable[str | Enum]) -> tuple[str, ...]:
    """``rng_types`` as plain strings (one name or enum member, or several).

    Raises:
        ValueError: on a name that is not in ``RNG_TYPES``.
    """
    kinds = (rng_types,) if isinstance(rng_types, (str, Enum)) else tuple(rng_types)
    names = tuple(str(getattr(kind, "value", kind)) for kind in kinds)
    unknown = [name for name in names if name not in RNG_TYPES]
    if unknown:
        raise ValueError(
            f"`rng_types` contains {unknown}, which are not known generators. "
            f"Use any of {list(RNG_TYPES)}, e.g. `rng_types=['generator']`."
        )
    return names


def normalize_rng_types(
    rng_types: Iterable[str | Enum] | None, generator: torch.Generator | None
) -> tuple[str, ...]:
    """Validate ``rng_types`` and return them as plain strings.

    Raises:
        ValueError: on an unknown type, ``"cuda"`` without CUDA, or ``"generator"`` with no generator.
    """
    if rng_types is None:
        return ()
    names = rng_names(rng_types)
    if "cuda" in names and not torch.cuda.is_available():
        raise ValueError(
            "`rng_types` contains 'cuda' but CUDA is not available on this machine. "
            "Remove 'cuda' from `rng_types` when running on CPU."
        )
    if "generator" in names and generator is None:
        raise ValueError(
            "`rng_types` contains 'generator' but the sampler has no generator to synchronise. "
            "Give the sampler a `torch.Generator`, or remove 'generator' from `rng_types`."
        )
    return tuple(dict.fromkeys(names))


def synchronize_rng_states(rng_types: tuple[str, ...], generator: torch.Generator | None) -> None:
    """Copy process 0's state of each generator in ``rng_types`` to every process (one collective), over the
    default group: under a mesh every rank gets global rank 0's state, so the ranks of one data-parallel
    index draw the same order (docs/DESIGN.md, "What the mesh decides").
    """
    if not rng_types:
        return
    accessors = [_accessors(name, generator) for name in rng_types]
    states = broadcast_object([get_state() for get_state, _ in accessors])
    for (_, set_state), state in zip(accessors, states, strict=True):
        set_state(state)


def _accessors(
    name: str, generator: torch.Generator | None
) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    """The getter and setter of the generator ``name`` stands for."""
    if name == "torch":
        return torch.get_rng_state, torch.set_rng_state
    if name == "cuda":
        return torch.cuda.get_rng_state, torch.cuda.set_rng_state
    assert generator is not None  # NOTE: normalize_rng_types refuses "generator" without one.
    return generator.get_state, generator.set_state
