"""Sample bitmaps, one bit per dataset index packed 8 per byte: what ``ShardAudit`` records, merges and
all-reduces (``audit.py``; docs/DESIGN.md, "Scale"). Work is chunked so that no temporary grows with the
dataset beyond a few megabytes."""

from __future__ import annotations

import base64

import torch

_CHUNK_BYTES = 1 << 20
_POPCOUNT = torch.tensor([bin(byte).count("1") for byte in range(256)], dtype=torch.int64)
_BITS = torch.arange(8, dtype=torch.uint8)
EXAMPLES = 5
"""Indices ``first`` lists at most (a report's examples)."""


def encode(bitmap: torch.Tensor) -> str:
    return base64.b64encode(bitmap.numpy().tobytes()).decode("ascii")


def decode(encoded: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(encoded)), dtype=torch.uint8).clone()


def popcount(bitmap: torch.Tensor) -> int:
    starts = range(0, bitmap.numel(), _CHUNK_BYTES)
    return sum(int(_POPCOUNT[bitmap[start : start + _CHUNK_BYTES].long()].sum()) for start in starts)


def count_dtype(num_processes: int) -> torch.dtype:
    """The narrowest type that sums ``num_processes`` sample states of at most 2 (NCCL has no int16)."""
    fits = [dtype for dtype in (torch.uint8, torch.int32) if 2 * num_processes <= torch.iinfo(dtype).max]
    return fits[0] if fits else torch.int64


def states(seen: torch.Tensor, repeated: torch.Tensor) -> torch.Tensor:
    """Each sample's state, 0 (unseen), 1 (seen once) or 2 (repeated), from the bitmaps' bytes."""
    return unpack(seen) + unpack(repeated)


def unpack(bitmap: torch.Tensor) -> torch.Tensor:
    """One ``uint8`` 0 or 1 per bit, sample ``8 * byte + bit`` at that position."""
    return ((bitmap.unsqueeze(1) >> _BITS) & 1).reshape(-1)


def pack(bits: torch.Tensor) -> torch.Tensor:
    """The bitmap of a boolean per sample (its length a multiple of 8), ``_unpack``'s inverse."""
    return (bits.reshape(-1, 8).to(torch.uint8) << _BITS).sum(dim=1, dtype=torch.uint8)


def _masks(indices: torch.Tensor) -> torch.Tensor:
    return torch.bitwise_left_shift(torch.ones_like(indices), indices & 7).to(torch.uint8)


def test_bits(bitmap: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Whether each index's bit is set."""
    return (bitmap[indices >> 3] & _masks(indices)) != 0


def set_bits(bitmap: torch.Tensor, indices: torch.Tensor) -> None:
    """Set the bits of ``indices``, which must be distinct and not set yet (adding is then or-ing)."""
    bitmap.index_put_((indices >> 3,), _masks(indices), accumulate=True)


def first(bitmap: torch.Tensor, value: bool, length: int) -> list[int]:
    """The first few (``EXAMPLES``) indices below ``length`` whose bit is ``value``."""
    found: list[int] = []
    for start in range(0, bitmap.numel(), _CHUNK_BYTES):
        hits = (
            torch.nonzero(unpack(bitmap[start : start + _CHUNK_BYTES]) == int(value)).reshape(-1) + start * 8
        )
        found += hits[hits < length][: EXAMPLES - len(found)].tolist()
        if len(found) == EXAMPLES:
            break
    return found
