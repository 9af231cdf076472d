"""The launch environment: the rank variables ``torchrun`` sets, which streaming libraries read, and the
warning an elastic ``torchrun`` launch needs (docs/DESIGN.md, "Lightning adapter", "Streams that split
themselves")."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_shard.log import warn

SHARE_SETTING = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def export_rank_variables(strategy: Any) -> None:
    """Set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` of a started ``strategy`` as
    ``torchrun`` does (their values under ``torchrun``, so a ``torchrun`` launch keeps its own)."""
    os.environ.update(
        RANK=str(strategy.global_rank),
        WORLD_SIZE=str(strategy.world_size),
        LOCAL_RANK=str(strategy.local_rank),
        LOCAL_WORLD_SIZE=str(len(strategy.parallel_devices or ())),
    )


def node_range(arguments: Sequence[str], environ: Mapping[str, str]) -> tuple[int, int] | None:
    """The ``(MIN, MAX)`` of a ``torchrun`` command line's ``--nnodes`` (or of ``PET_NNODES``, torchrun's
    environment default); ``None`` when it is not a range or cannot be read."""
    value = environ.get("PET_NNODES")
    for index, argument in enumerate(arguments):
        if argument.startswith("--nnodes="):
            value = argument.split("=", 1)[1]
        elif argument == "--nnodes" and index + 1 < len(arguments):
            value = arguments[index + 1]
    if value is None or ":" not in value:
        return None
    low, high = value.split(":", 1)
    return (int(low), int(high)) if low.isdigit() and high.isdigit() else None


def store_sharing_problem(environ: Mapping[str, str], agent_arguments: Sequence[str]) -> str | None:
    """The warning for a worker of an elastic ``torchrun`` whose agents share the rendezvous store, else
    ``None`` (not started by ``torchrun``, not elastic, or already set)."""
    if "TORCHELASTIC_RUN_ID" not in environ or environ.get(SHARE_SETTING) == "1":
        return None
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    nodes = node_range(agent_arguments, environ)
    if nodes is None or nodes[0] == nodes[1]:
        return None
    return (
        f"lightning_shard: this job was started by an elastic `torchrun` (`--nnodes={nodes[0]}:{nodes[1]}`) "
        "whose agents share the rendezvous store with the workers (torch's default). A node that joins "
        "later cannot start: the agent of rank 0 publishes its address only at its first rendezvous, so "
        "the new node waits for it, and after 60 s the rendezvous fails on every node: the whole job "
        "stops. Start every `torchrun` "
        f"of the job with `{SHARE_SETTING}=1` in its environment, e.g. "
        f"`{SHARE_SETTING}=1 torchrun --nnodes={nodes[0]}:{nodes[1]} ...` (a worker cannot set it for its "
        "agent). Nodes that leave and workers that fail restart without it."
    )


def agent_arguments(pid: int | None = None) -> list[str]:
    """The command line of this worker's ``torchrun`` agent, its parent (empty where ``/proc`` has none)."""
    try:
        raw = (Path("/proc") / str(pid or os.getppid()) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def warn_about_store_sharing() -> None:
    """Warn once, on rank 0, when an elastic ``torchrun`` launch cannot grow (see the module's docstring)."""
    problem = store_sharing_problem(os.environ, agent_arguments())
    if problem is not None:
        warn(problem)
