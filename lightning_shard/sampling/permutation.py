"""``KeyedPermutation``: a pseudo-random permutation of ``[0, n)`` that can be evaluated at any position.

A Feistel network on the ``b`` bits of ``n``, restricted to ``[0, n)`` by cycle-walking and keyed by
``(seed, epoch)`` only: every process computes the same order without communicating, each only at the
positions it needs (docs/DESIGN.md, "Scale"). Up to ``_SMALL`` samples it is a ``randperm`` seeded with the
key: a network on so few bits reaches only some orders, unevenly. Values stay below ``2^32`` inside a round
and the multipliers below ``2^31``, so no ``int64`` product overflows.
"""

from __future__ import annotations

import torch

_ROUNDS = 8
_SMALL = 1 << 16
_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
"""SplitMix64's increment of its state (the golden ratio in 64 bits)."""
_MULTIPLIER = 0x45D9F3B
"""The multiplier of a well-mixing 32-bit integer hash (two multiply-xorshift steps)."""


class KeyedPermutation:
    """The permutation of ``[0, length)`` keyed by ``(seed, epoch)``, integers reduced modulo ``2^64``."""

    def __init__(self, length: int, seed: int, epoch: int) -> None:
        self.length = length
        bits = max(length - 1, 0).bit_length()
        self.low_bits = bits - bits // 2
        self.high_bits = bits // 2
        self.keys = _round_keys(seed, epoch)
        self.table: torch.Tensor | None = None
        if length <= _SMALL:
            generator = torch.Generator().manual_seed(self.keys[0] << 32 | self.keys[1])
            self.table = torch.randperm(length, generator=generator)

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """``perm[positions]`` (``int64``, the shape of ``positions``); positions must lie in ``[0, n)``."""
        if self.table is not None:
            return self.table[positions.to(torch.int64)]
        values = self._encrypt(positions.to(torch.int64))  # NOTE: `_encrypt` returns a new tensor.
        outside = values >= self.length
        while bool(outside.any()):
            values[outside] = self._encrypt(values[outside])
            outside = values >= self.length
        return values

    def _encrypt(self, values: torch.Tensor) -> torch.Tensor:
        """One pass of the Feistel network over ``[0, 2^b)``: rounds alternate which part they change."""
        low_mask, high_mask = (1 << self.low_bits) - 1, (1 << self.high_bits) - 1
        high, low = values >> self.low_bits, values & low_mask
        for round_index, key in enumerate(self.keys):
            if round_index % 2:
                high ^= _mix(low, key) & high_mask
            else:
                low ^= _mix(high, key) & low_mask
        return high.bitwise_left_shift_(self.low_bits).bitwise_or_(low)


def _mix(values: torch.Tensor, key: int) -> torch.Tensor:
    """A keyed 32-bit integer hash of each value (values below ``2^32`` in and out); a new tensor."""
    mixed = values ^ key
    for _ in range(2):  # NOTE: two multiply-xorshift steps, then a last xorshift.
        mixed ^= mixed >> 16
        mixed.mul_(_MULTIPLIER).bitwise_and_(_MASK32)
    mixed ^= mixed >> 16
    return mixed


def _round_keys(seed: int, epoch: int) -> list[int]:
    """``_ROUNDS`` 32-bit keys from ``(seed, epoch)``, by SplitMix64 (any two keys give unrelated rounds)."""
    # NOTE: SplitMix64's state advances by its gamma at each key: key `k` mixes the state `k + 1` steps on.
    state = seed * _GAMMA + epoch
    return [splitmix64((state + (k + 1) * _GAMMA) & _MASK64) & _MASK32 for k in range(_ROUNDS)]


def splitmix64(state: int) -> int:
    """SplitMix64's finaliser: a 64-bit integer mixed so that nearby inputs give unrelated outputs."""
    mixed = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    mixed = ((mixed ^ (mixed >> 27)) * 0x94D049BB133111EB) & _MASK64
    return mixed ^ (mixed >> 31)
