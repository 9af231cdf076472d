"""The collectives the core uses: objects and tensors across the default process group; each is the identity
(or a one-element list) without one, so single-process code paths need no special case. Among them, whether
every process holds the same batch: a digest of it, compared in one all-reduce of three integers (a maximum),
whatever the number of processes (docs/DESIGN.md, "Iterables left as they are")."""

from __future__ import annotations

import atexit
import functools
import hashlib
import pickle
from collections.abc import Mapping
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
    return bool(all_reduce_ints([int(flag)], dist.ReduceOp.MIN)[0])


def all_reduce_ints(values: list[int], op: dist.ReduceOp.RedOpType, group: Any = None) -> list[int]:
    """``values`` reduced element-wise by ``op`` over the processes of ``group`` (the default group: ``None``),
    in one all-reduce of a small tensor on the ``communication_device``."""
    reduced = torch.tensor(values, dtype=torch.int64, device=communication_device())
    dist.all_reduce(reduced, op=op, group=group)
    return reduced.tolist()


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


# -- whether every process holds the same batch ------------------------------------------------------
_NONE = -(1 << 62)
"""What a process without a batch sends as its digest: below every digest (``[0, 2**62)``)."""


def batch_digest(batch: Any) -> int:
    """A 62-bit digest of ``batch``'s contents: each tensor's dtype, shape and bytes, each container's
    structure, each other value pickled (its ``repr`` if it cannot be)."""
    digest = hashlib.blake2b(digest_size=8)
    _feed(digest, batch)
    return int.from_bytes(digest.digest(), "little") >> 2


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"tensor{value.dtype}{tuple(value.shape)}".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    elif isinstance(value, Mapping):
        digest.update(f"map{len(value)}".encode())
        for key, item in value.items():
            _feed(digest, key)
            _feed(digest, item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__}{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    else:
        try:
            digest.update(pickle.dumps(value))
        except Exception:  # noqa: BLE001 - any object: what cannot be pickled is told apart by its repr
            digest.update(repr(value).encode())


def same_on_every_process(digest: int | None) -> bool:
    """Whether every process passed the same ``digest`` (``None``: this process has no batch, so not every
    process holds the same). Every process must call it; ``False`` without a process group."""
    if not is_distributed():
        return False
    values = [_NONE, _NONE, 1] if digest is None else [digest, -digest, 0]
    largest, smallest, any_without = all_reduce_ints(values, dist.ReduceOp.MAX)
    return not any_without and largest == -smallest
