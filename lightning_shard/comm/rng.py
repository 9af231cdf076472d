"""Synchronising random number generators from process 0 at the start of each epoch.

Only the sampler's (or iterable dataset's) generator and the global generators named in
``rng_types`` are synchronised; DataLoader workers keep their own seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

import torch

from lightning_shard.comm.collectives import broadcast_object

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
