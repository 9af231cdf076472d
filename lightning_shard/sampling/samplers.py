"""Samplers whose order is a pure function of their inputs, index-level skipping (the contract of a batch
sampler that can start anywhere in its epoch by arithmetic), and epoch propagation through wrappers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sized
from typing import Any, Protocol, runtime_checkable

import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from lightning_shard._checks import check_non_negative, check_seed
from lightning_shard.sampling.permutation import KeyedPermutation

_CHUNK_POSITIONS = 1 << 16
"""Positions of a keyed order computed at once: its memory is ``O(batch)``, not ``O(epoch)``."""


class SeedableRandomSampler(RandomSampler):
    """A ``RandomSampler`` whose order is a pure function of ``(data_seed, epoch)``.

    The permutation of epoch ``e`` is the one ``RandomSampler`` draws from a generator seeded with
    ``data_seed + e``. Unlike the reference, iterating does not advance ``epoch``: only ``set_epoch``
    changes it, so a resumed run replays the permutation of the epoch it stopped in.

    Args:
        data_source: the dataset to sample from.
        replacement: as for ``RandomSampler``.
        num_samples: as for ``RandomSampler``.
        generator: as for ``RandomSampler``; a given generator is re-seeded at the start of each iteration.
        data_seed: the base seed; defaults to ``torch.initial_seed()`` when ``None``.

    Raises:
        TypeError: if ``data_seed`` is not an integer.
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
        *,
        data_seed: int | None = None,
    ) -> None:
        super().__init__(data_source, replacement=replacement, num_samples=num_samples, generator=generator)
        seed = check_seed("data_seed", data_seed)
        self.initial_seed: int = seed if seed is not None else torch.initial_seed()
        self.epoch: int = 0
        # NOTE: a private generator's state after an epoch is unobservable.
        self.owns_generator = generator is None
        if self.generator is None:
            self.generator = torch.Generator()

    def reseed(self) -> torch.Generator:
        """Seed the generator for the current epoch and return it."""
        assert self.generator is not None  # NOTE: set in __init__; kept Optional by the base class.
        self.generator.manual_seed(self.initial_seed + self.epoch)
        return self.generator

    def __iter__(self) -> Iterator[int]:
        self.reseed()
        yield from super().__iter__()

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of ``epoch``; never changed by iterating."""
        self.epoch = epoch


class ScalableRandomSampler(SeedableRandomSampler):
    """A shuffle whose index at any position is computed alone (``scalable_shuffle=True``): the order of
    epoch ``e`` is ``KeyedPermutation(len(data_source), data_seed, e)``, so a sharded process computes only
    its own positions (docs/DESIGN.md, "Scale"). As for ``SeedableRandomSampler``, only ``set_epoch`` changes
    the epoch; the order differs from ``RandomSampler``'s, and it draws from no generator.
    """

    def __init__(self, data_source: Sized, *, data_seed: int | None = None) -> None:
        super().__init__(data_source, data_seed=data_seed)
        # NOTE: no generator, so none is synchronised across processes each epoch: the key is the seed.
        self.generator = None

    def order(self) -> KeyedPermutation:
        """The permutation of the current epoch, to evaluate at positions."""
        return KeyedPermutation(len(self.data_source), self.initial_seed, self.epoch)

    def __iter__(self) -> Iterator[int]:
        order, length = self.order(), len(self.data_source)
        for start in range(0, length, _CHUNK_POSITIONS):
            yield from order.at(torch.arange(start, min(start + _CHUNK_POSITIONS, length))).tolist()


def scalable_batch_sampler(batch_sampler: Any, data_seed: int | None) -> Any:
    """``batch_sampler`` with its ``RandomSampler`` replaced by a ``ScalableRandomSampler`` (a copy); a
    sequential one, which shuffles nothing, as it is.

    Raises:
        ValueError: for what a keyed order cannot serve: another batch sampler or sampler than a plain
            ``BatchSampler`` / ``RandomSampler``, a ``generator``, replacement or ``num_samples``.
    """
    sampler = getattr(batch_sampler, "sampler", None)
    if type(sampler) is SequentialSampler or type(sampler) is ScalableRandomSampler:
        return batch_sampler
    if type(batch_sampler) is not BatchSampler or type(sampler) is not RandomSampler:
        shown = type(sampler if type(batch_sampler) is BatchSampler else batch_sampler).__name__
        raise ValueError(
            f"`scalable_shuffle=True` replaces a plain `RandomSampler` (`shuffle=True`) in a plain `BatchSampler`, "
            f"but this loader's order comes from a `{shown}`, whose order it cannot compute position by "
            "position. Build the loader with `shuffle=True` and `batch_size=...`, or set `scalable_shuffle=False`."
        )
    if sampler.generator is not None:
        raise ValueError(
            "`scalable_shuffle=True` draws each epoch's order from `(data_seed, epoch)`, but this loader's "
            "`RandomSampler` has a `generator` of its own, whose draws would be ignored. Drop the `generator` "
            "(pass `data_seed=...` to choose the order), or set `scalable_shuffle=False`."
        )
    if sampler.replacement or sampler._num_samples is not None:
        raise ValueError(
            f"`scalable_shuffle=True` shuffles every sample once per epoch, but this `RandomSampler` has "
            f"`replacement={sampler.replacement}` and `num_samples={sampler._num_samples}`. Use "
            "`RandomSampler(dataset)` (`shuffle=True`), or set `scalable_shuffle=False`."
        )
    scalable = ScalableRandomSampler(sampler.data_source, data_seed=data_seed)
    return BatchSampler(scalable, batch_sampler.batch_size, batch_sampler.drop_last)


@runtime_checkable
class SeekableBatchSampler(Protocol):
    """A batch sampler that yields its epoch from any batch on, also after an elastic restore.

    ``BatchSamplerShard`` implements it; ``EpochCursor`` and ``SkipBatchSampler`` use it when the batch
    sampler they wrap does, and otherwise walk the wrapped sampler's batches of indices (never the data).
    """

    def iter_from(self, start: int, *, consumed: int = 0) -> Iterator[list[int]]:
        """This process's batches from its batch ``start`` on, once ``consumed`` batches of the wrapped
        (unsharded) batch sampler are gone."""
        ...

    def length_after(self, consumed: int) -> int:
        """How many batches this process yields once ``consumed`` batches of the wrapped sampler are gone."""
        ...


def takes_epoch(target: Any) -> bool:
    """Whether ``target`` (a dataset, a sampler) has a ``set_epoch`` of its own: the one place that asks."""
    return callable(getattr(target, "set_epoch", None))


def pass_epoch(target: Any, epoch: int) -> bool:
    """Set ``epoch`` on ``target`` if it takes one (``takes_epoch``); whether it did."""
    if takes_epoch(target):
        target.set_epoch(epoch)
        return True
    return False


def forward_epoch(child: Any, epoch: int) -> None:
    """Set ``epoch`` on ``child`` and on everything it wraps (``batch_sampler``, ``sampler``), each once
    (docs/DESIGN.md, "Epoch purity"). The walk goes on below an object with a ``set_epoch`` of its own: a
    user's batch sampler may define one that does not forward it; setting an epoch twice is harmless.
    """
    seen: set[int] = set()
    stack = [child]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        pass_epoch(node, epoch)
        stack.extend(getattr(node, name, None) for name in ("batch_sampler", "sampler"))


class ShowsWrapped:
    """Mixin of what wraps a batch sampler: its ``batch_size``, ``drop_last`` and ``sampler`` show through."""

    batch_sampler: Any

    @property
    def batch_size(self) -> int | None:
        return getattr(self.batch_sampler, "batch_size", None)

    @property
    def drop_last(self) -> bool:
        return bool(getattr(self.batch_sampler, "drop_last", False))

    @property
    def sampler(self) -> Any:
        """The wrapped batch sampler's index sampler, if it has one."""
        return getattr(self.batch_sampler, "sampler", None)


class BatchSamplerWrapper(ShowsWrapped, BatchSampler):  # type: ignore[misc,override]
    """Base of batch samplers that wrap another: its ``batch_size``, ``drop_last`` and ``sampler`` show through."""


class SkipBatchSampler(BatchSamplerWrapper):
    """Yields the batches of ``batch_sampler`` after the first ``skip_batches``, by index only.

    When the wrapped sampler is a ``SeekableBatchSampler`` (as ``BatchSamplerShard`` is), the skip costs
    arithmetic; otherwise it walks the skipped indices without loading data.

    Args:
        batch_sampler: the batch sampler to skip into.
        skip_batches: how many batches of the current epoch to skip.

    Raises:
        ValueError: if ``skip_batches`` is negative.
    """

    def __init__(self, batch_sampler: Any, skip_batches: int = 0) -> None:
        self.batch_sampler = batch_sampler
        self.skip_batches = check_non_negative("skip_batches", skip_batches)

    def __iter__(self) -> Iterator[list[int]]:
        if isinstance(self.batch_sampler, SeekableBatchSampler):
            yield from self.batch_sampler.iter_from(self.skip_batches)
        else:
            yield from itertools.islice(iter(self.batch_sampler), self.skip_batches, None)

    @property
    def total_length(self) -> int:
        return len(self.batch_sampler)

    def __len__(self) -> int:
        return max(len(self.batch_sampler) - self.skip_batches, 0)

    def set_epoch(self, epoch: int) -> None:
        forward_epoch(self.batch_sampler, epoch)


class SampleShard:
    """A shard of one-sample batches seen as a sampler of single indices (``DataLoader(batch_size=None)``,
    which yields one sample per step, uncollated); a ``SeekableBatchSampler``, so resumption stays arithmetic.
    """

    def __init__(self, shard: Any) -> None:
        self.shard = shard

    @property
    def sampler(self) -> Any:
        return self.shard.sampler

    @property
    def num_processes(self) -> int:
        return int(self.shard.num_processes)

    @property
    def even_batches(self) -> Any:
        return self.shard.even_batches

    split_batches = False
    drop_last = False
    batch_size = 1

    def set_epoch(self, epoch: int) -> None:
        self.shard.set_epoch(epoch)

    def iter_from(self, start: int, *, consumed: int = 0) -> Iterator[int]:
        return (batch[0] for batch in self.shard.iter_from(start, consumed=consumed))

    def length_after(self, consumed: int) -> int:
        return int(self.shard.length_after(consumed))

    def __iter__(self) -> Iterator[int]:
        return self.iter_from(0)

    def __len__(self) -> int:
        return self.length_after(0)
