"""The user's own sampler, kept: its class and attributes stay, its random order becomes a recorded stream
(docs/DESIGN.md, "The user's own sampler"). A sampler that draws from a ``generator`` attribute is copied
with a generator of its own; one that may draw from the global generators is wrapped in ``OwnDraws``."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import BatchSampler, RandomSampler

from lightning_shard.sampling.samplers import (
    OwnOrder,
    SamplerKind,
    SeedableRandomSampler,
    sampler_kind,
    scalable_batch_sampler,
)


@dataclass(eq=False)
class OwnDraws(OwnOrder):
    """``batch_sampler`` with its random draws taken from a stream of its own, seeded at each ``iter()``
    from ``generator`` (the loader's), re-seeded first with ``initial_seed + epoch`` when ``initial_seed`` (the
    ``data_seed``) is given.

    With ``global_draws`` every step of the wrapped iterator runs with torch's CPU and Python's global
    generators set to that stream and restored after, so the sampler's draws and the model's never
    interleave. The loader saves ``initial_seed`` (a seedable sampler's too).
    """

    batch_sampler: Any
    generator: torch.Generator
    initial_seed: int | None
    global_draws: bool
    epoch: int = 0

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def set_epoch(self, epoch: int) -> None:
        """Record ``epoch`` (``forward_epoch`` reaches the wrapped batch sampler through ``batch_sampler``)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        # NOTE: a generator function: nothing is drawn before the first batch is asked for. With workers, torch
        # calls `iter()` on the index sampler twice and drops the first iterator unstarted.
        if self.initial_seed is not None:
            self.generator.manual_seed(self.initial_seed + self.epoch)
        yield from _isolated(self.batch_sampler, self.generator) if self.global_draws else self.batch_sampler


def _isolated(batch_sampler: Any, generator: torch.Generator) -> Iterator[Any]:
    """Iterate ``batch_sampler`` with the global generators set to a stream seeded with a draw from ``generator``."""
    seed = int(torch.randint(1 << 62, (), generator=generator))
    own_torch = torch.Generator().manual_seed(seed).get_state()
    own_python = random.Random(seed).getstate()
    source: Iterator[Any] | None = None
    while True:
        outer_torch, outer_python = torch.get_rng_state(), random.getstate()
        torch.set_rng_state(own_torch)
        random.setstate(own_python)
        try:
            source = iter(batch_sampler) if source is None else source
            batch = next(source)
        except StopIteration:
            return
        finally:
            own_torch, own_python = torch.get_rng_state(), random.getstate()
            torch.set_rng_state(outer_torch)
            random.setstate(outer_python)
        yield batch


def own_generator() -> torch.Generator:
    """A generator seeded with a draw from the global RNG, as the reference seeds a ``RandomSampler``'s."""
    return torch.Generator().manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))


def _with_own_generator(sampler: RandomSampler, seedable: bool, data_seed: int | None) -> RandomSampler:
    """A plain ``RandomSampler`` whose order is recorded (a generator) and, if asked, seedable."""
    # NOTE: `_num_samples` is the constructor argument, None meaning len(data).
    same: dict[str, Any] = {"replacement": sampler.replacement, "num_samples": sampler._num_samples}
    if seedable:
        return SeedableRandomSampler(
            sampler.data_source, **same, generator=sampler.generator, data_seed=data_seed
        )
    if sampler.generator is not None:
        return sampler
    # NOTE: drawn from the global RNG exactly as the reference does, so seeded runs agree with it.
    return RandomSampler(sampler.data_source, **same, generator=own_generator())


def recorded_batch_sampler(
    batch_sampler: Any, *, seedable: bool, scalable: bool, data_seed: int | None
) -> Any:
    """The user's batch sampler with a recorded random order (the user's objects are not mutated), under the
    options ``use_seedable_sampler`` (``seedable``), ``scalable_shuffle`` (``scalable``) and ``data_seed``."""
    kind = sampler_kind(batch_sampler)
    if scalable:
        return scalable_batch_sampler(batch_sampler, kind, data_seed)
    if kind.exact and kind.known is RandomSampler:
        sampler = _with_own_generator(kind.sampler, seedable, data_seed)
        return BatchSampler(sampler, kind.batch_size, kind.drop_last)  # type: ignore[arg-type]
    if kind.exact and kind.seeded is not None:
        return batch_sampler
    return _kept_with_own_randomness(batch_sampler, kind, seedable, data_seed)


def _kept_with_own_randomness(
    batch_sampler: Any, kind: SamplerKind, seedable: bool, data_seed: int | None
) -> Any:
    """The user's (batch) sampler, its class kept, its draws recorded: a sampler whose ``generator`` is left
    ``None`` draws from the global RNG, which a resumed run cannot replay, so a copy gets one of its own."""
    if kind.draws and kind.sampler.generator is None:
        # NOTE: shallow copies, the user's classes and attributes kept (a plain `BatchSampler` too).
        twin = copy.copy(kind.sampler)
        twin.generator = own_generator()
        batch_sampler = copy.copy(batch_sampler)
        batch_sampler.sampler = twin
        kind = sampler_kind(batch_sampler)
    seeded = seedable and (kind.draws or kind.global_draws)
    if not (kind.global_draws or seeded):
        return batch_sampler
    seed = (data_seed if data_seed is not None else torch.initial_seed()) if seeded else None
    return OwnDraws(batch_sampler, kind.generator or own_generator(), seed, kind.global_draws)
