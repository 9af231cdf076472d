"""Where a loader's batches come from: one ``BatchSource`` per kind of data, each yielding an epoch's batches
from an immutable start as ``(batch, is_last)`` (docs/DESIGN.md, "Kinds of data", "No singleton")."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

import torch

from lightning_shard.comm.rng import synchronize_rng_states
from lightning_shard.comm.tree import batch_length, send_to_device
from lightning_shard.loaders.position import Position, ShardingInfo

if TYPE_CHECKING:
    from lightning_shard.loaders.streams import StreamRun
    from lightning_shard.sampling.self_split import SelfSplit

Batches = Generator[tuple[Any, bool], None, None]
"""An epoch's batches, each with whether it is the last."""


class BatchSource(ABC):
    """The contract of a loader's source of batches, driven by the ``Resumption``; ``loader`` is the
    ``DataLoaderShard`` or ``DataLoaderDispatcher`` it reads for (untyped: the loaders hold their source)."""

    stream: StreamRun | None = None
    """The end agreement of a stream's processes (and each one's position in a share of its own)."""

    library: SelfSplit | None = None
    """How a stream that splits itself does it (a library's own resume, why shares do not carry over)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    @abstractmethod
    def batches(self, start: Position) -> Batches:
        """This process's batches of the epoch ``start`` begins (a restore, or an epoch's start)."""

    @abstractmethod
    def length_after(self, base: int) -> int:
        """This process's batches in an epoch once ``base`` units of it were consumed before it began."""

    @abstractmethod
    def sharding(self) -> ShardingInfo:
        """The sharding it applies, as the saved state records it."""

    @abstractmethod
    def set_epoch(self, epoch: int) -> None:
        """Put the data (sampler, stream) at ``epoch``."""

    def generator(self) -> torch.Generator | None:
        """The generator the epoch's order is drawn from, if any (saved with the state)."""
        return None

    def seeded(self) -> Any:
        """What holds the seed of a seeded order (``SamplerKind.seeded``, ``sampling/samplers.py``), or ``None``."""
        return None

    def workers(self) -> int:
        """The ``DataLoader`` workers the loader reads with."""
        return int(self.loader.num_workers)

    def synchronize(self) -> None:  # noqa: B027 - a hook: nothing to copy unless a source says otherwise
        """Copy what process 0 decides of the next epoch's randomness (nothing, but for a map-style shard)."""


class ShardSource(BatchSource):
    """What the sources of a ``DataLoaderShard`` share: before an epoch, process 0's random states of its
    ``rng_types`` are copied to every process."""

    def synchronize(self) -> None:
        synchronize_rng_states(self.loader.rng_types, self.loader.synchronized_generator)


class StreamSource(ShardSource):
    """What the sources of a stream share: this process's ``shard`` of it, its end agreement and, for one that
    splits itself, its kind's ``library``."""

    stream: StreamRun

    def __init__(self, loader: Any, shard: Any, stream: StreamRun) -> None:
        super().__init__(loader)
        self.shard = shard
        self.stream = stream
        self.library = loader.kind.library

    def set_epoch(self, epoch: int) -> None:
        self.shard.set_epoch(epoch)

    def stream_sharding(self, drop_last: bool) -> ShardingInfo:
        """The sharding of ``shard``, recorded under its kind's name, with its dataset's length but for a dataset
        that splits itself: that one reports its own share's length (LitData), which differs by rank, and the
        state must be the same on every process."""
        shard = self.shard
        length = getattr(shard.dataset, "__len__", None) if self.loader.kind.library is None else None
        return ShardingInfo(
            mode="shard",
            num_processes=shard.num_processes,
            split_batches=shard.split_batches,
            even_batches=self.stream.even_batches,
            drop_last=drop_last,
            batch_size=shard.batch_size,
            dataset_length=int(length()) if callable(length) else None,
            sampler=self.loader.kind.state_name,
        )


def marked_last(batches: Iterator[Any], move: Callable[[Any], Any] | None = None) -> Batches:
    """Each of ``batches`` (``move``d, if given) with whether it is the last, one batch read ahead (no
    collective: map-style data ends where arithmetic says, on every process alike)."""
    current = next(batches, _END)
    while current is not _END:
        if move is not None:
            current = move(current)
        following = next(batches, _END)
        yield current, following is _END
        current = following


_END = object()


def moving(loader: Any) -> Callable[[Any], Any] | None:
    """What puts each batch on ``loader``'s device (``None``: left where it is)."""
    if loader.device is None:
        return None
    return functools.partial(send_to_device, device=loader.device, non_blocking=loader.non_blocking)


def rows_of(loader: Any) -> Callable[[Any], int]:
    """How many samples a batch of ``loader`` holds (one a step with ``batch_size=None``, unless the dataset
    yields batches itself; a torchdata.nodes graph's source reads lists of its root's items)."""
    if loader.kind.pipeline is not None:
        return len
    library = loader.kind.library
    batched = library is not None and library.yields_batches
    return batch_length if loader.batch_size is not None or batched else _one


def _one(batch: Any) -> int:
    return 1
