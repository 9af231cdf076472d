"""The random draws of a map-style loader's main-process fetches, kept apart from the model's: each fetch runs
with torch's CPU generator seeded from ``(epoch seed, epoch, process, step)`` and restored after
(docs/DESIGN.md, "Random states on resume")."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import TensorDataset, default_collate, default_convert

from lightning_shard.sampling.permutation import splitmix64

_MASK = (1 << 63) - 1
_DRAW_FREE_DATASETS = (TensorDataset, range, list, tuple, torch.Tensor)
"""Dataset types whose ``__getitem__`` draws nothing."""
_DRAW_FREE_COLLATES = (default_collate, default_convert)


def fetches_may_draw(dataset: object, collate_fn: object) -> bool:
    """Whether fetching from ``dataset`` and collating with ``collate_fn`` may draw random numbers (torch's own
    draw nothing, so a loader of only those skips the few microseconds of keeping each fetch apart)."""
    return not (isinstance(dataset, _DRAW_FREE_DATASETS) and collate_fn in _DRAW_FREE_COLLATES)


def epoch_seed(generator_state: str | None, fallback: int) -> int:
    """The seed of an epoch's fetch draws: a hash of the loader's generator state at the epoch's start (saved
    with the position, and agreed wherever the processes' orders are), else ``fallback``."""
    if generator_state is None:
        return fallback & _MASK
    digest = hashlib.blake2b(generator_state.encode("ascii"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _MASK


def fetch_seed(seed: int, epoch: int, process_index: int, step: int) -> int:
    """A seed for fetch ``step`` of ``epoch`` on ``process_index``: distinct inputs, unrelated seeds."""
    value = seed & _MASK
    for part in (epoch, process_index, step):
        value = splitmix64(value ^ (part + 0x9E3779B97F4A7C15)) & _MASK
    return value


def isolated_fetches(
    make: Callable[[], Iterator[Any]],
    key: Callable[[int], int],
    start: int,
    each_fetch: bool,
    when: Callable[[int], bool] | None = None,
) -> Iterator[Any]:
    """Iterate ``make()``: creating it, and each fetch if ``each_fetch`` (those of the steps ``when`` picks, if
    given), with torch's CPU generator seeded with ``key(step)`` (steps counted from ``start``) and the caller's
    state restored after."""
    generator, step = torch.default_generator, start
    outer = torch.get_rng_state()
    generator.manual_seed(key(-1))
    try:
        source = make()
    finally:
        torch.set_rng_state(outer)
    if not each_fetch:
        yield from source
        return
    while True:
        if when is not None and not when(step):
            try:
                batch = next(source)
            except StopIteration:
                return
            yield batch
            step += 1
            continue
        outer = torch.get_rng_state()
        generator.manual_seed(key(step))
        try:
            batch = next(source)
        except StopIteration:
            return
        finally:
            torch.set_rng_state(outer)
        yield batch
        step += 1
