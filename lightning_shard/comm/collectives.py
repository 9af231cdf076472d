"""The collectives the core uses: objects and tensors across the default process group; each is the identity
(or a one-element list) without one, so single-process code paths need no special case."""

from __future__ import annotations

import atexit
import functools
from typing import Any

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """Whether a default ``torch.distributed`` process group is running."""
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """Processes in the default group (1 without one)."""
    return dist.get_world_size() if is_distributed() else 1


def global_rank() -> int:
    """This process's rank in the default group (0 without one)."""
    return dist.get_rank() if is_distributed() else 0


def broadcast_object(value: Any, src: int = 0) -> Any:
    """``value`` from global rank ``src`` on every process (identity without a process group)."""
    if not is_distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_objects(value: Any) -> list[Any]:
    """Every process's ``value``, in rank order (``[value]`` without a process group)."""
    if not is_distributed():
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def all_true(flag: bool) -> bool:
    """Whether ``flag`` holds on every process: one all-reduce (a minimum) of one integer, whatever the
    number of processes (``flag`` itself without a process group)."""
    if not is_distributed():
        return flag
    value = torch.tensor([int(flag)], dtype=torch.int64, device=communication_device())
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def communication_device() -> torch.device:
    """The device tensors must be on for the default group's backend (CUDA for NCCL)."""
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


_HELD_GROUPS: list[dist.ProcessGroup] = []
"""The default groups ``destroy_group_at_exit`` was called under, held until ``_destroy_default_group`` runs."""


def destroy_group_at_exit() -> None:
    """Hold the default process group from now on; when the interpreter exits, destroy it if it is still
    initialised, then let it go (docs/DESIGN.md, "No hangs"). Lightning registers such a destroy for NCCL only.

    Whoever drops a gloo group's last reference joins its threads, and one of them may still need the GIL
    to free DDP's last gradient all-reduce (pytorch#56297). DDP's reducer drops its reference holding the
    GIL: a hang when it is the last one (a script that destroyed the group while its model was alive). The
    Python object held here goes last, and its destructor releases the GIL; so the threads also end before
    the interpreter's teardown, where one that still needs the GIL aborts the process (exit 134).
    """
    world = dist.group.WORLD if is_distributed() else None
    if world is not None and not any(held is world for held in _HELD_GROUPS):
        _HELD_GROUPS.append(world)
    _register_destroy()


@functools.cache
def _register_destroy() -> None:
    atexit.register(_destroy_default_group)


def _destroy_default_group() -> None:
    if is_distributed():
        dist.destroy_process_group()
    # NOTE: `clear` drops each group holding the GIL; torch's `ProcessGroup` binding releases it before the
    # destructor joins the group's threads (`tests/core/test_exit.py` fails if it no longer does).
    _HELD_GROUPS.clear()
