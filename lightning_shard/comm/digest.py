"""A digest of a batch, and whether every process holds the same one: one all-reduce of three integers (a
maximum), whatever the number of processes (docs/DESIGN.md, "Iterables left as they are")."""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from lightning_shard.comm.collectives import communication_device, is_distributed

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
    extremes = torch.tensor(values, dtype=torch.int64, device=communication_device())
    dist.all_reduce(extremes, op=dist.ReduceOp.MAX)
    largest, smallest, any_without = (int(value) for value in extremes.tolist())
    return not any_without and largest == -smallest
