"""Samplers whose order is a pure function of their inputs, index-level skipping (the contract of a batch
sampler that can start anywhere in its epoch by arithmetic), and epoch propagation through wrappers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sized
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from lightning_shard._checks import check_non_negative, check_seed
from lightning_shard.sampling.balance import EvenBatches
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
        self.generator = torch.Generator() if generator is None else generator

    def reseed(self) -> torch.Generator:
        """Seed the generator for the current epoch and return it."""
        assert self.generator is not None  # NOTE: set in __init__; kept Optional by the base class.
        return self.generator.manual_seed(self.initial_seed + self.epoch)

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


def scalable_batch_sampler(batch_sampler: Any, kind: SamplerKind, data_seed: int | None) -> Any:
    """``batch_sampler`` (of ``kind``) with its ``RandomSampler`` replaced by a ``ScalableRandomSampler`` (a copy);
    a sequential one, which shuffles nothing, as it is.

    Raises:
        ValueError: for what a keyed order cannot serve: another batch sampler or sampler than a plain
            ``BatchSampler`` / ``RandomSampler``, a ``generator``, replacement or ``num_samples``.
    """
    sampler = kind.sampler
    if kind.known in (SequentialSampler, ScalableRandomSampler):
        return batch_sampler
    if not kind.exact or kind.known is not RandomSampler:
        shown = type(sampler if kind.exact else batch_sampler).__name__
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
    return BatchSampler(scalable, kind.batch_size, kind.drop_last)  # type: ignore[arg-type]


class OwnOrder:
    """Mixin of a batch sampler of ours over the user's ``batch_sampler`` whose order is drawn from ``generator``,
    re-seeded with ``initial_seed`` and the epoch when that is set (``own_sampler.OwnDraws``)."""


_KNOWN_ORDERS = (SequentialSampler, RandomSampler, SeedableRandomSampler, ScalableRandomSampler)
"""Index samplers whose order ``fast_index.py`` computes by arithmetic (their exact classes, not subclasses)."""


@dataclass(frozen=True)
class SamplerKind:
    """What a batch sampler is and can do, decided once by ``sampler_kind`` and read by everything after (the
    shard, its fast path, the loader's sources and saved state; docs/DESIGN.md, "Kinds of data")."""

    sampler: Any
    """Its index sampler (``None``: it has none)."""
    batch_size: int | None
    drop_last: bool
    known: type | None
    """The index sampler's class when it is exactly one of ``_KNOWN_ORDERS``."""
    exact: bool
    """A plain ``BatchSampler``: its batches are consecutive slices of its sampler's order."""
    plain: bool
    """It batches as ``BatchSampler`` does (only the epoch's last batch may be short), seen through ``OwnOrder``."""
    counted: bool
    """Its batch sizes follow from its sized sampler's length (a bucketing sampler's do not)."""
    draws: bool
    """Its index sampler has a ``generator`` attribute (given or left ``None``)."""
    global_draws: bool
    """Iterating it may draw from the global generators: a batch sampler class of the user's, or a sampler that
    neither draws nothing (``SequentialSampler``) nor draws from a generator of its own."""
    generator: torch.Generator | None
    """The generator its order is drawn from (its state at the epoch's start is saved)."""
    seeded: Any
    """What holds the seed (``initial_seed``) its order is a function of: a seeded ``OwnOrder`` or the
    ``SeedableRandomSampler``; ``None`` when the order is not seeded."""

    @property
    def name(self) -> str:
        """What a saved state records of it: its index sampler's class name (``"none"`` without one)."""
        return "none" if self.sampler is None else type(self.sampler).__name__


def sampler_kind(batch_sampler: Any) -> SamplerKind:
    """The ``SamplerKind`` of ``batch_sampler``: the one place that inspects a batch sampler and its sampler."""
    own: Any = batch_sampler if isinstance(batch_sampler, OwnOrder) else None
    user = batch_sampler if own is None else own.batch_sampler
    cls, sampler, batch_size = type(user), getattr(user, "sampler", None), getattr(user, "batch_size", None)
    plain = cls.__iter__ is BatchSampler.__iter__ and cls.__len__ is BatchSampler.__len__
    generator = own.generator if own is not None else getattr(sampler, "generator", None)
    seedable = sampler if isinstance(sampler, SeedableRandomSampler) else None
    return SamplerKind(
        sampler=sampler,
        batch_size=batch_size,
        drop_last=bool(getattr(user, "drop_last", False)),
        known=type(sampler) if type(sampler) in _KNOWN_ORDERS else None,
        exact=own is None and cls is BatchSampler,
        plain=plain,
        counted=plain and isinstance(sampler, Sized) and batch_size is not None,
        draws=hasattr(sampler, "generator"),
        global_draws=cls.__iter__ is not BatchSampler.__iter__
        or not (type(sampler) is SequentialSampler or generator is not None),
        generator=generator if isinstance(generator, torch.Generator) else None,
        seeded=own if own is not None and own.initial_seed is not None else seedable,
    )


class KnowsKind:
    """Mixin of an index source of ours that holds the ``SamplerKind`` of the user's batch sampler it reads
    (``BatchSamplerShard``, ``SampleShard``): a cursor over it reads that kind, not the wrapper's, and how
    it shards."""

    kind: SamplerKind
    num_processes: int
    split_batches: bool
    even_batches: EvenBatches


class ShardedAs(NamedTuple):
    """How a wrapped batch sampler shards the user's: as one of ours says, else one process reads it whole."""

    num_processes: int = 1
    split_batches: bool = False
    even_batches: EvenBatches = True


@runtime_checkable
class SeekableBatchSampler(Protocol):
    """A batch sampler that yields its epoch from any batch on, also after an elastic restore.

    ``BatchSamplerShard`` implements it; ``EpochCursor`` and ``SkipBatchSampler`` use it when the batch
    sampler they wrap does, and otherwise walk the wrapped sampler's batches of indices (never the data).
    """

    def iter_from(self, start: int, *, consumed: int = 0) -> Iterator[list[int]]:
        """This process's batches from its batch ``start`` on, once ``consumed`` batches of the wrapped
        (unsharded) batch sampler are gone."""

    def length_after(self, consumed: int) -> int:
        """How many batches this process yields once ``consumed`` batches of the wrapped sampler are gone."""


def dataset_generator(dataset: Any) -> torch.Generator | None:
    """The generator an iterable dataset carries as ``generator`` (the reference's convention: seeded with the
    epoch and kept alike on every process), if any."""
    generator = getattr(dataset, "generator", None)
    return generator if isinstance(generator, torch.Generator) else None


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


class BatchSamplerWrapper(BatchSampler):  # type: ignore[misc]
    """Base of batch samplers that wrap another (``batch_sampler``): its ``batch_size``, ``drop_last`` and
    ``sampler`` show through, read from ``kind``, the kind of the user's batch sampler under it."""

    batch_sampler: Any
    kind: SamplerKind
    seekable: bool
    """Whether the wrapped batch sampler seeks by arithmetic (a ``SeekableBatchSampler``)."""
    sharded_as: ShardedAs

    def __init__(self, wrapped: Any) -> None:
        self.batch_sampler = wrapped
        self.kind, self.seekable, self.sharded_as = wrapped_kind(wrapped)

    @property
    def batch_size(self) -> int | None:  # type: ignore[override]
        return self.kind.batch_size

    @property
    def drop_last(self) -> bool:  # type: ignore[override]
        return self.kind.drop_last

    @property
    def sampler(self) -> Any:  # type: ignore[override]
        """The wrapped batch sampler's index sampler, if it has one."""
        return self.kind.sampler

    def batches_from(self, start: int, consumed: int = 0) -> Iterator[Any]:
        """The wrapped batch sampler's batches from its batch ``start`` on, once ``consumed`` batches of the
        user's are gone: by arithmetic where it seeks (``seekable``), else walked, indices only."""
        if self.seekable:
            return iter(self.batch_sampler.iter_from(start, consumed=consumed))
        return itertools.islice(iter(self.batch_sampler), consumed + start, None)

    def set_epoch(self, epoch: int) -> None:
        """Forward ``epoch`` to the wrapped samplers."""
        forward_epoch(self.batch_sampler, epoch)


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
        super().__init__(batch_sampler)
        self.skip_batches = check_non_negative("skip_batches", skip_batches)

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches_from(self.skip_batches)  # NOTE: a generator: nothing is drawn before `next()`

    def __len__(self) -> int:
        return max(len(self.batch_sampler) - self.skip_batches, 0)


def wrapped_kind(wrapped: Any) -> tuple[SamplerKind, bool, ShardedAs]:
    """The kind under a wrapper of ``wrapped`` (a shard of ours holds the kind of the user's batch sampler it
    shards), whether ``wrapped`` seeks by arithmetic (a ``SeekableBatchSampler``) and how it shards; asked
    once, when built."""
    seekable = isinstance(wrapped, SeekableBatchSampler)
    if isinstance(wrapped, KnowsKind):
        sharded = ShardedAs(wrapped.num_processes, wrapped.split_batches, wrapped.even_batches)
        return wrapped.kind, seekable, sharded
    return sampler_kind(wrapped), seekable, ShardedAs()


class SampleShard(KnowsKind):
    """A shard of one-sample batches seen as a sampler of single indices (``DataLoader(batch_size=None)``,
    which yields one sample per step, uncollated); a ``SeekableBatchSampler``, so resumption stays arithmetic.
    """

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.kind = shard.kind
        self.sampler = shard.sampler
        self.num_processes: int = shard.num_processes
        self.even_batches = shard.even_batches

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
