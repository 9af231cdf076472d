"""Continuous randomness when Lightning rebuilds the training loaders (a reload, or a second ``fit``): the
loader built at position ``p`` of a round takes over the generator of the loader at ``p`` in the round
before (docs/DESIGN.md, "Epoch purity")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from lightning_shard.lightning.stages import ShardLoader, is_shard_loader
from lightning_shard.loaders.state import decode_generator_state


class TrainingLoaderRounds:
    """The training loaders of the current round (being built) and of the round before, in build order."""

    def __init__(self) -> None:
        self.current: list[Any] = []
        self.previous: list[Any] = []

    def predecessor(self) -> ShardLoader | None:
        """The loader of the round before at the position the next one will take, if any."""
        position = len(self.current)
        earlier = self.previous[position] if position < len(self.previous) else None
        return earlier if is_shard_loader(earlier) else None

    @contextmanager
    def building(self) -> Iterator[None]:
        """Build the next loader without drawing from the global RNG when it will take over a generator."""
        with torch.random.fork_rng(devices=[]) if self.predecessor() is not None else nullcontext():
            yield

    def add(self, loader: Any) -> None:
        """Record ``loader`` (built at the next position); it continues its predecessor's random stream."""
        earlier = self.predecessor()
        if is_shard_loader(loader) and earlier is not None:
            _continue_stream(earlier, loader)
        self.current.append(loader)

    def keep(self, loader: ShardLoader) -> None:
        """Record a loader of an earlier round handed back as it is; it goes on with its own random stream."""
        self.current.append(loader)

    def close(self) -> None:
        """The round is complete (a fit or an epoch starts): the next built loaders follow on from it."""
        if self.current:
            self.previous, self.current = self.current, []


def _continue_stream(earlier: ShardLoader, loader: ShardLoader) -> None:
    # NOTE: a loader whose checkpoint state waits for its next `iter()` goes on from that state, not from its
    # generator and seed as they are before it is applied.
    pending = earlier.pending_position
    saved = pending.generator_state if pending is not None else None
    source, target = earlier.resumption.source.generator(), loader.resumption.source.generator()
    if target is not None and source is not target:
        if saved is not None:
            target.set_state(decode_generator_state(saved))
        elif source is not None:
            target.set_state(source.get_state())
    # NOTE: a seedable sampler's order is (seed, epoch): its seed goes on too, as restored from a checkpoint
    # (the default seed is the process's `torch.initial_seed()`, another one in a resumed run).
    seed = pending.sampler_seed if pending is not None else None
    seed = seed if seed is not None else earlier.resumption.sampler_seed()
    seeded = loader.resumption.source.seeded()
    if seeded is not None and seed is not None:
        seeded.initial_seed = seed
