"""The user's own sampler, kept: its class and attributes stay, its random order becomes a recorded stream
(docs/DESIGN.md, "The user's own sampler").

A sampler that draws from a ``generator`` attribute (``RandomSampler`` and its subclasses,
``WeightedRandomSampler``, ``SubsetRandomSampler``) is copied with a generator of its own, as a
``DataLoader`` subclass is copied. A sampler or batch sampler that may draw from torch's or Python's global
generators (``torch.randperm(n)``, ``random.shuffle``) is wrapped in ``OwnDraws``: its draws come from a
stream seeded at each epoch from the loader's generator, kept apart from the model's, so a resumed epoch
draws the same order. NumPy's global generator is not covered (its state costs ~0.1 ms to swap).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, SequentialSampler

_FREE_OF_DRAWS = (SequentialSampler,)
"""Sampler classes whose order draws nothing."""


def copy_with_generator(sampler: Any, generator: torch.Generator) -> Any:
    """A shallow copy of ``sampler`` (same class and attributes) drawing from ``generator``."""
    twin = copy.copy(sampler)
    twin.generator = generator
    return twin


def with_sampler(batch_sampler: Any, sampler: Any) -> Any:
    """``batch_sampler`` over ``sampler``: a new ``BatchSampler``, or a shallow copy of the user's class."""
    if type(batch_sampler) is BatchSampler:
        return BatchSampler(sampler, batch_sampler.batch_size, batch_sampler.drop_last)
    twin = copy.copy(batch_sampler)
    twin.sampler = sampler
    return twin


def may_draw_globally(batch_sampler: Any) -> bool:
    """Whether iterating ``batch_sampler`` may draw from the global generators: a user's batch sampler
    class, or a sampler that is neither draw-free nor drawing from a generator of its own."""
    if type(batch_sampler).__iter__ is not BatchSampler.__iter__:
        return True
    sampler = getattr(batch_sampler, "sampler", None)
    return not (type(sampler) in _FREE_OF_DRAWS or getattr(sampler, "generator", None) is not None)


class OwnDraws:
    """``batch_sampler`` with its random draws taken from a stream of its own, seeded each epoch.

    At each ``iter()`` the stream of the epoch is seeded from ``generator`` (re-seeded with
    ``data_seed + epoch`` first when ``data_seed`` is given, so the order is a function of the seed and
    the epoch). With ``global_draws=True`` every step of the wrapped iterator runs with torch's CPU and
    Python's global generators set to that stream and restored after, so the draws of the sampler and
    those of the model never interleave.

    Args:
        batch_sampler: the user's batch sampler (not changed).
        generator: the loader's generator; its state at the epoch's start is what the loader saves.
        data_seed: the seed of ``use_seedable_sampler=True``, else ``None``.
        global_draws: whether to isolate the global generators while the batch sampler runs.
    """

    def __init__(
        self, batch_sampler: Any, generator: torch.Generator, data_seed: int | None, global_draws: bool
    ) -> None:
        self.batch_sampler = batch_sampler
        self.generator = generator
        self.data_seed = data_seed
        self.global_draws = global_draws
        self.epoch = 0

    @property
    def sampler(self) -> Any:
        """The wrapped batch sampler's index sampler, if it has one."""
        return getattr(self.batch_sampler, "sampler", None)

    @property
    def batch_size(self) -> int | None:
        return getattr(self.batch_sampler, "batch_size", None)

    @property
    def drop_last(self) -> bool:
        return bool(getattr(self.batch_sampler, "drop_last", False))

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def set_epoch(self, epoch: int) -> None:
        """Record ``epoch`` (``forward_epoch`` reaches the wrapped batch sampler through ``batch_sampler``)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        if self.data_seed is not None:
            self.generator.manual_seed(self.data_seed + self.epoch)
        if not self.global_draws:
            return iter(self.batch_sampler)
        seed = int(torch.randint(1 << 62, (), generator=self.generator))
        return _isolated(self.batch_sampler, seed)


def _isolated(batch_sampler: Any, seed: int) -> Iterator[Any]:
    """Iterate ``batch_sampler`` with the global generators set to a stream seeded with ``seed``."""
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


def unwrapped(batch_sampler: Any) -> Any:
    """The user's batch sampler under an ``OwnDraws``."""
    return batch_sampler.batch_sampler if isinstance(batch_sampler, OwnDraws) else batch_sampler


def generator_of(batch_sampler: Any) -> torch.Generator | None:
    """The generator the epoch's order is drawn from (its state at the epoch's start is what is saved)."""
    if isinstance(batch_sampler, OwnDraws):
        return batch_sampler.generator
    generator = getattr(getattr(batch_sampler, "sampler", None), "generator", None)
    return generator if isinstance(generator, torch.Generator) else None
