"""Where a loader's batches come from: one ``BatchSource`` per kind of data, each yielding an epoch's batches
from an immutable start as ``(batch, is_last)`` (docs/DESIGN.md, "Kinds of data", "No singleton"). Here the
contract, map-style data's source (``MapSource``: batches of indices from an ``EpochCursor``, a resume being
index arithmetic, "Global state") and an unsharded iterable's (``PlainSource``), and what makes a torchdata.nodes
graph's batches of the root items one of them reads (``piped``, "torchdata.nodes"); a stream's sources are in
``loaders/strided_source.py``."""

from __future__ import annotations

import collections
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterator, Sized
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from lightning_shard.comm.random_states import synchronize_rng_states
from lightning_shard.comm.tree import send_to_device
from lightning_shard.loaders.position import Position, ShardingInfo
from lightning_shard.loaders.stream_agreement import fetches_may_draw, isolated_fetches
from lightning_shard.sampling.batch_shard import marked_last
from lightning_shard.sampling.samplers import BatchSamplerWrapper, forward_epoch, pass_epoch
from lightning_shard.sampling.torchdata_nodes import NodesGraph

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
        """This process's batches in an epoch once ``base`` (in the sharding's ``read_unit``) were read before it began."""

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

    def synchronize(self) -> None:  # noqa: B027 - a hook: nothing to copy unless a source says otherwise
        """Copy what process 0 decides of the next epoch's randomness (nothing, but for a map-style shard)."""


class ShardSource(BatchSource):
    """What the sources of a ``DataLoaderShard`` share: before an epoch, process 0's random states of its
    ``rng_types`` are copied to every process."""

    def synchronize(self) -> None:
        synchronize_rng_states(self.loader.rng_types, self.loader.synchronized_generator)

    def length_after(self, base: int) -> int:
        """The ``DataLoader``'s own length, whatever was read before: where the loader resumes no position (a
        plain iterable), or reads a share of a stream (the shares differ in length, so the loader has none:
        ``NativeStreamShard`` has no ``__len__``)."""
        return DataLoader.__len__(self.loader)


def moving(loader: Any) -> Callable[[Any], Any] | None:
    """What puts each batch on ``loader``'s device (``None``: left where it is)."""
    if loader.device is None:
        return None
    return functools.partial(send_to_device, device=loader.device, non_blocking=loader.non_blocking)


IndexObserver = Callable[[Iterator[Any]], Iterator[Any]]
"""Wraps one iteration's batches of indices, yielding them on (``ShardAuditCallback``'s ``IndexTap``)."""


class EpochCursor(BatchSamplerWrapper):
    """Wraps a (sharded) batch sampler; the next iteration (only) starts at this process's batch ``start``
    after ``consumed`` batches of the user's batch sampler (an elastic restore), both set by ``rewind`` just
    before the loader creates its iterator and taken by that iteration, so no skipped sample is loaded (a
    sampler that is not a ``SeekableBatchSampler`` is walked, indices only) and the iterations after it,
    and ``len()``, are whole epochs again."""

    def __init__(self, batch_sampler: Any) -> None:
        super().__init__(batch_sampler)
        self.start = 0
        self.consumed = 0
        self.observer: IndexObserver | None = None
        """Wraps each iteration's batches of indices when set (``ShardAuditCallback`` records them)."""

    def rewind(self, start: int = 0, consumed: int = 0) -> None:
        """Make the next iteration start at ``start`` after ``consumed`` (both 0: the epoch's start)."""
        self.start, self.consumed = start, consumed

    def __iter__(self) -> Iterator[Any]:
        batches = self._batches()
        return batches if self.observer is None else self.observer(batches)

    def _batches(self) -> Iterator[Any]:
        # NOTE: taken at the first batch, not at `iter()`: a DataLoader with workers calls `iter()` twice on its
        # first iteration and uses the second.
        start, consumed, self.start, self.consumed = self.start, self.consumed, 0, 0
        yield from self.batches_from(start, consumed)

    def length_after(self, consumed: int) -> int:
        """This process's batches in an epoch once ``consumed`` batches of the user's sampler are gone."""
        if self.seekable:
            return int(self.batch_sampler.length_after(consumed))
        return max(len(self.batch_sampler) - consumed, 0)

    def __len__(self) -> int:
        return self.length_after(self.consumed)


class MapSource(ShardSource):
    """Map-style data read by index through ``cursor`` (a ``BatchSamplerShard`` inside it), from where a start
    sets it; the main process's fetches draw apart from the model's (``loaders/stream_agreement.py``)."""

    def __init__(self, loader: Any, cursor: EpochCursor) -> None:
        super().__init__(loader)
        self.cursor = cursor

    def batches(self, start: Position) -> Batches:
        loader = self.loader
        process = loader.topology.process_index if loader.topology is not None else 0
        each_fetch = loader.num_workers == 0 and fetches_may_draw(loader.dataset, loader.collate_fn)
        read = functools.partial(self._read, start)
        loaded = isolated_fetches(read, start, loader.draw_seed, process, each_fetch)
        return marked_last(loaded, moving(loader))

    def _read(self, start: Position) -> Iterator[Any]:
        """The user's batches from ``start``: the cursor is set where the ``DataLoader``'s iterator, created
        right after, takes its indices from."""
        self.cursor.rewind(start.start, start.read_before_resume)
        return self.loader.user_batches()

    def length_after(self, base: int) -> int:
        return self.cursor.length_after(base)

    def sharding(self) -> ShardingInfo:
        sharded, dataset, kind = self.cursor.sharded_as, self.loader.dataset, self.cursor.kind
        return ShardingInfo(
            mode="shard",
            num_processes=sharded.num_processes,
            split_batches=sharded.split_batches,
            even_batches=sharded.even_batches,
            drop_last=kind.drop_last,
            batch_size=kind.batch_size,
            dataset_length=len(dataset) if isinstance(dataset, Sized) else None,
            sampler=kind.name,
        )

    def set_epoch(self, epoch: int) -> None:
        self.cursor.set_epoch(epoch)

    def generator(self) -> torch.Generator | None:
        return self.loader.synchronized_generator or self.cursor.kind.generator

    def seeded(self) -> Any:
        return self.cursor.kind.seeded


class PlainSource(ShardSource):
    """An iterable dataset the loader does not shard (a ``DataLoaderShard`` built directly over one): read as
    the ``DataLoader`` reads it, without a position to resume."""

    def batches(self, start: Position) -> Batches:
        if start.start or start.read_before_resume:
            raise ValueError(
                "This loader's dataset is iterable but not an `IterableDatasetShard`, so it cannot skip "
                f"{start.start + start.read_before_resume} batches. Build the loader with `prepare_data_loader`."
            )
        return marked_last(self.loader.user_batches(), moving(self.loader))

    def sharding(self) -> ShardingInfo:
        return ShardingInfo(
            "shard", 1, False, True, bool(self.loader.drop_last), self.loader.batch_size, None, "none"
        )

    def set_epoch(self, epoch: int) -> None:
        if not pass_epoch(self.loader.dataset, epoch):
            forward_epoch(self.loader.batch_sampler, epoch)


AHEAD = 1
"""Steps handed to the graph before the one whose batch is awaited, so its workers go on across steps."""


def piped(steps: Batches, graph: NodesGraph, move: Callable[[Any], Any] | None = None) -> Batches:
    """Each of ``steps`` (a step's root items, with whether it is the last) made a batch by ``graph`` rebuilt
    over a ``Feed``, ``move``d if given. Where an epoch stands, what is saved and how a resume skips are the
    source's that reads the steps: the graph only maps, so what it prefetched is never what a state records
    (the steps the loop consumed are).

    NOTE: every step is read here, in the loader's thread, and handed over: what reads the steps (a sampler's
    draws, a stream's collectives) must never run in the graph's threads, whose timing differs by process.
    """
    # NOTE: imported here: torchdata.nodes exists from torchdata 0.10, the package supports 0.8 on.
    from lightning_shard.sampling.nodes_feed import Feed

    feed = Feed()
    root = graph.build(feed)
    lasts: collections.deque[bool] = collections.deque()

    def hand_over() -> None:
        step = next(steps, None)
        if step is None:
            feed.close()  # NOTE: again at each later call: the graph gets `StopIteration` either way
        else:
            feed.put(list(step[0]))
            lasts.append(step[1])

    try:
        for _ in range(AHEAD + 1):
            hand_over()
        while lasts:
            try:
                batch = next(root)
            except StopIteration:
                raise RuntimeError(
                    f"The torchdata.nodes graph `{graph.describe()}` ended with {len(lasts)} steps of its root's "
                    "items still handed to it: one of its nodes yields fewer batches than it is given steps. "
                    "Report this with the graph: lightning_shard rebuilds only nodes that yield one batch per step."
                ) from None
            last = lasts.popleft()
            hand_over()
            yield (batch if move is None else move(batch)), last
    finally:
        feed.close()
