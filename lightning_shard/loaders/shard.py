"""``DataLoaderShard``: the per-process loader, a real ``DataLoader`` subclass (docs/DESIGN.md, "Real loader
subclasses", "No singleton", "Global state")."""

from __future__ import annotations

import copy
import functools
import itertools
import math
from collections.abc import Callable, Generator, Iterator, Sized
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    default_collate,
    default_convert,
)
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_shard._checks import check_non_negative
from lightning_shard.comm.collectives import is_distributed
from lightning_shard.comm.rng import normalize_rng_types, synchronize_rng_states
from lightning_shard.comm.topology import Topology
from lightning_shard.comm.tree import batch_length, send_to_device
from lightning_shard.loaders.base import LoaderSource, ResumableLoader, marked_last
from lightning_shard.loaders.cursor import EpochCursor
from lightning_shard.loaders.main_draws import epoch_seed, fetch_seed, fetches_may_draw, isolated_fetches
from lightning_shard.loaders.position import Position, ShardingInfo
from lightning_shard.loaders.resumable import Resumption
from lightning_shard.loaders.settings import loader_settings, sampler_kind
from lightning_shard.loaders.stream_agreement import checked_first
from lightning_shard.loaders.stream_replay import replayed_batches
from lightning_shard.loaders.streams import SHORTEST, StreamEnds, StreamRun, stream_ends_for, stream_sharding
from lightning_shard.loaders.user_class import carry_user_attributes, init_data_loader
from lightning_shard.sampling.iterable_shard import IterableDatasetShard
from lightning_shard.sampling.native_stream import STRIDED_STREAM, NativeStreamShard
from lightning_shard.sampling.samplers import SampleShard
from lightning_shard.sampling.stream_fingerprint import CollateFingerprinted


class DataLoaderShard(ResumableLoader):
    """Yields this process's batches, optionally on ``device``, and can resume anywhere in an epoch.

    Build it with a ``BatchSamplerShard`` (map-style) or an ``IterableDatasetShard`` (iterable) as
    ``prepare_data_loader`` does; any other ``DataLoader`` arguments pass through.

    Args:
        dataset: the dataset, or an ``IterableDatasetShard``.
        device: where to put each batch (``None``: leave it).
        rng_types: generators to copy from process 0 at each ``iter()``: ``"torch"``, ``"cuda"``,
            ``"generator"`` (the sampler's, given as ``synchronized_generator``).
        synchronized_generator: the sampler's (or iterable dataset's) generator.
        skip_batches: batches to skip at the start of the first iteration, by index only.
        use_stateful_dataloader: back this loader by torchdata's ``StatefulDataLoader``: ``True`` makes
            the constructor return its class's variant (``StatefulDataLoaderShard``, or
            ``stateful_loader_class(cls)`` for a subclass).
        non_blocking: asynchronous host-to-device copies (useful with ``pin_memory=True``).
        topology: the data-parallel topology the shard was built for (``prepare_data_loader`` passes
            it); ``None``: the default process group is the data-parallel group.
        stream_ends: how the processes' streams end (``loaders/streams.py``; docs/DESIGN.md, "Streaming
            data"): ``"same"`` (a strided stream: all end together), ``"pad"`` (a share of its own),
            ``"shortest"`` or ``"own"``; ``None``: ``"same"`` or ``"pad"`` by the stream's kind.
        **kwargs: any other ``DataLoader`` argument.

    Raises:
        ValueError / TypeError: on a negative ``skip_batches`` or bad ``rng_types``.
    """

    def __init__(
        self,
        dataset: Any,
        device: torch.device | str | None = None,
        rng_types: list[str] | None = None,
        synchronized_generator: torch.Generator | None = None,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        non_blocking: bool = False,
        *,
        stream_ends: StreamEnds | None = None,
        topology: Topology | None = None,
        data_seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        skip_batches = check_non_negative("skip_batches", skip_batches)
        self.rng_types = normalize_rng_types(rng_types, synchronized_generator)
        kwargs = _collate_fingerprinted(dataset, _index_source_with_cursor(dataset, kwargs))
        init_data_loader(self, dataset, **kwargs)
        self.device = None if device is None else torch.device(device)
        self.non_blocking = non_blocking
        self.synchronized_generator = synchronized_generator
        self.use_stateful_dataloader = use_stateful_dataloader
        self.topology = topology
        self.draw_seed = data_seed if data_seed is not None else torch.initial_seed()
        """The seed of the main-process fetches' draws when the loader has no generator (``loaders/main_draws.py``)."""
        self.stream = _stream_run(dataset, stream_ends, topology)
        """The end agreement of a stream (and each process's position in a native one), else ``None``."""
        self._discard = 0
        self._replay: Callable[[], Iterator[Any]] | None = None
        """The rest of an epoch replayed in its order (``loaders/stream_replay.py``), else ``None``."""
        library = dataset.library if isinstance(dataset, NativeStreamShard) else None
        self.resumption = Resumption(
            _ShardSource(self), skip_batches=skip_batches, stream=self.stream, library=library
        )

    def _seek(self, position: Position) -> None:
        """Make this iteration start at this process's batch ``position.start`` after ``position.base``."""
        cursor, start, base = self.cursor, position.start, position.base
        self._discard = 0
        self._replay = None
        if self.stream is not None:
            self.stream.begin(start)
        if cursor is not None:
            cursor.rewind(start, base)
        elif isinstance(self.dataset, NativeStreamShard):
            return  # NOTE: its `StreamRun` skips; `check_resumable` refused a `base` (another process count).
        elif isinstance(self.dataset, IterableDatasetShard):
            self._seek_stream(self.dataset, position)
        elif start or base:
            raise ValueError(
                "This loader's dataset is iterable but not an `IterableDatasetShard`, so it cannot skip "
                f"{start + base} batches. Build the loader with `prepare_data_loader`."
            )

    def _seek_stream(self, shard: IterableDatasetShard, position: Position) -> None:
        start, base = position.start, position.base
        workers = self.num_workers if position.workers is None else position.workers
        if base and workers > 0:
            # NOTE: another number of processes read part of this epoch with workers: replay the epoch's
            # order (`loaders/stream_replay.py`); skipping inside each worker would skip the wrong elements.
            steps, loader = position.base_steps, self
            self._replay = lambda: replayed_batches(
                shard, consumed=base, steps=steps, workers=workers, start=start, loader=loader
            )
            return
        # NOTE: each worker iterates its own copy of the stream and the DataLoader interleaves their
        # batches, so with workers the batches to skip are dropped after interleaving: exact, at the cost
        # of collating them.
        self._discard = start if workers > 0 else 0
        shard.resume(skip_steps=start - self._discard, skip_elements=base)

    def _user_batches(self) -> Iterator[Any]:
        if self._replay is not None:
            return self._replay()
        if isinstance(self.dataset, NativeStreamShard):
            self.dataset.before_pass()
        return super()._user_batches()

    def fresh_copy(self) -> DataLoaderShard:
        """A loader with every setting of this one and a position of its own (at the epoch's start).

        The dataset is shared; the index source (batch sampler, sampler, generator) or iterable shard
        is copied, so iterating one never moves the other. The epoch is kept.
        """
        shared = {id(_user_dataset(self.dataset)): _user_dataset(self.dataset)}
        cursor = self.cursor
        kwargs = dict(loader_settings(self))
        if cursor is None:
            dataset = copy.deepcopy(self.dataset, shared)
            kwargs.update(batch_size=self.batch_size, drop_last=self.drop_last)
        else:
            dataset = self.dataset
            index = copy.deepcopy(cursor.batch_sampler, shared)
            kwargs.update(
                {"sampler": index, "batch_size": None} if cursor is self.sampler else {"batch_sampler": index}
            )
        # NOTE: one memo for everything copied: a generator shared by the sampler, the loader (worker seeds)
        # and `synchronized_generator` stays one generator in the copy.
        kwargs["generator"] = copy.deepcopy(self.generator, shared)
        twin = type(self)(
            dataset,
            device=self.device,
            rng_types=list(self.rng_types),
            synchronized_generator=copy.deepcopy(self.synchronized_generator, shared),
            use_stateful_dataloader=self.use_stateful_dataloader,
            non_blocking=self.non_blocking,
            topology=self.topology,
            data_seed=self.draw_seed,
            stream_ends=self.stream.stream_ends if self.stream is not None else None,
            **kwargs,
        )
        carry_user_attributes(twin, self, getattr(self, "user_attributes", ()))
        twin.set_epoch(self.epoch)
        return twin

    # -- iteration --------------------------------------------------------------------------------
    def _epoch(self, position: Position) -> Generator[tuple[Any, bool], None, None]:
        loaded = self._user_batches() if self.cursor is None else self._isolated_batches(position)
        shard = self.dataset
        if isinstance(shard, IterableDatasetShard) and shard.fingerprinted:
            compare = self.stream is not None and self.stream.spans_group
            loaded = checked_first(
                loaded, shard.dataset, shard.num_processes, shard.process_index,
                compare=compare, pin=self.pin_memory, in_order=getattr(self, "in_order", True),
            )  # fmt: skip
        batches = itertools.islice(loaded, self._discard, None) if self._discard else loaded
        move = None
        if self.device is not None:
            move = functools.partial(send_to_device, device=self.device, non_blocking=self.non_blocking)
        if self.stream is None:
            return marked_last(batches, move)
        # NOTE: a stream's `StreamRun` agrees with the other processes on when all stop.
        rows = batch_length if self.batch_size is not None else _one
        return self.stream.batches(batches, self._user_batches, rows, self.epoch, position.steps, move)

    def _isolated_batches(self, position: Position) -> Iterator[Any]:
        """The user's batches of a map-style epoch, their main-process draws apart from the model's."""
        seed, epoch = epoch_seed(position.generator_state, self.draw_seed), self.epoch
        process = self.topology.process_index if self.topology is not None else 0
        return isolated_fetches(
            self._user_batches,
            lambda step: fetch_seed(seed, epoch, process, step),
            position.start,
            each_fetch=self.num_workers == 0 and fetches_may_draw(self.dataset, self.collate_fn),
        )


class StatefulDataLoaderShard(DataLoaderShard, StatefulDataLoader):
    """``DataLoaderShard`` backed by torchdata's ``StatefulDataLoader`` (``use_stateful_dataloader=True``).

    ``state_dict`` / ``load_state_dict`` are the shard state's, as for ``DataLoaderShard``.
    NOTE: torchdata's own ``StatefulDataLoader.state_dict(loader)`` is not a resume point of this loader:
    it counts the batch this loader has read ahead (to know the epoch's last batch), so it is not offered.
    """


class _ShardSource(LoaderSource):
    """Where a ``DataLoaderShard``'s batches come from: the ``IndexSource`` of its ``Resumption``."""

    loader: DataLoaderShard

    @property
    def _shard(self) -> Any:
        cursor = self.loader.cursor
        return cursor.batch_sampler if cursor is not None else self.loader.dataset

    def sharding(self) -> ShardingInfo:
        shard, loader = self._shard, self.loader
        if loader.stream is not None:
            return stream_sharding(shard, loader.stream, bool(loader.drop_last))
        return ShardingInfo(
            mode="shard",
            num_processes=getattr(shard, "num_processes", 1),
            split_batches=bool(getattr(shard, "split_batches", False)),
            even_batches=getattr(shard, "even_batches", True),
            drop_last=bool(getattr(shard, "drop_last", False)),
            batch_size=getattr(shard, "batch_size", None),
            dataset_length=len(loader.dataset) if isinstance(loader.dataset, Sized) else None,
            sampler=sampler_kind(self.sampler(), loader.dataset),
        )

    def generator(self) -> torch.Generator | None:
        if self.loader.synchronized_generator is not None:
            return self.loader.synchronized_generator
        return getattr(self.sampler(), "generator", None)

    def sampler(self) -> Any:
        return getattr(self._shard, "sampler", None)

    def synchronize(self) -> None:
        synchronize_rng_states(self.loader.rng_types, self.loader.synchronized_generator)

    def length_after(self, base: int) -> int:
        loader, dataset = self.loader, self.loader.dataset
        if loader.cursor is not None:
            return loader.cursor.length_after(base)
        if not isinstance(dataset, IterableDatasetShard):
            return DataLoader.__len__(loader)
        # NOTE: all stop at the shortest: the last process has the fewest elements of the last global batch.
        shortest = loader.stream is not None and loader.stream.stream_ends == SHORTEST
        elements = dataset.length_after(base, dataset.num_processes - 1 if shortest else None)
        if loader.batch_size is None:
            return elements
        rounded = math.floor if loader.drop_last else math.ceil
        return int(rounded(elements / loader.batch_size))


def _covers_group(num_processes: int, topology: Topology | None) -> bool:
    """Whether every rank of the default group iterates a loader of this topology."""
    if not is_distributed():
        return False
    if topology is None:
        return dist.get_world_size() == num_processes
    return topology.covers_world()


def _stream_run(dataset: Any, stream_ends: StreamEnds | None, topology: Topology | None) -> StreamRun | None:
    """The ``StreamRun`` of a native share or a strided stream; ``None`` for map-style data.

    ``stream_ends`` is the policy ``prepare_data_loader`` decided (``stream_ends_for``); ``None`` (a loader
    built directly) takes the stream's kind's policy with ``even_batches=True``.
    """
    native = isinstance(dataset, NativeStreamShard)
    if not (native or isinstance(dataset, IterableDatasetShard)):
        return None
    if stream_ends is None:
        stream_ends = stream_ends_for(dataset.kind if native else STRIDED_STREAM, even_batches=True)
    covers = _covers_group(dataset.num_processes, topology)
    return StreamRun(
        stream_ends, dataset.num_processes, dataset.process_index, resumable=native, spans_group=covers
    )


def _one(batch: Any) -> int:
    return 1


def _user_dataset(dataset: Any) -> Any:
    return dataset.dataset if isinstance(dataset, (IterableDatasetShard, NativeStreamShard)) else dataset


def _collate_fingerprinted(dataset: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The collate of a strided stream whose first element carries a fingerprint (``IterableDatasetShard``'s
    ``fingerprinted``): the user's, passing the fingerprint on (``CollateFingerprinted``)."""
    if not (isinstance(dataset, IterableDatasetShard) and dataset.fingerprinted):
        return kwargs
    collate = kwargs.get("collate_fn")
    if isinstance(collate, CollateFingerprinted):
        return kwargs
    if collate is None:
        collate = default_collate if kwargs.get("batch_size", 1) is not None else default_convert
    return {**kwargs, "collate_fn": CollateFingerprinted(collate)}


def _index_source_with_cursor(dataset: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Route the loader's batch indices through an ``EpochCursor`` (map-style datasets only)."""
    if isinstance(dataset, IterableDataset):
        return kwargs
    kwargs = dict(kwargs)
    if isinstance(kwargs.get("sampler"), SampleShard):
        kwargs["sampler"] = EpochCursor(kwargs["sampler"])
    elif kwargs.get("batch_sampler") is not None:
        kwargs["batch_sampler"] = EpochCursor(kwargs["batch_sampler"])
    elif isinstance(kwargs.get("sampler"), BatchSampler) and kwargs.get("batch_size", 1) is None:
        kwargs["sampler"] = EpochCursor(kwargs["sampler"])
    elif kwargs.get("batch_size", 1) is not None:
        kwargs["batch_sampler"] = EpochCursor(_default_batch_sampler(dataset, kwargs))
    return kwargs


def _default_batch_sampler(dataset: Any, kwargs: dict[str, Any]) -> BatchSampler:
    """The batch sampler ``DataLoader`` would build from ``batch_size`` / ``shuffle`` / ``sampler``."""
    sampler, shuffle = kwargs.pop("sampler", None), kwargs.pop("shuffle", None)
    if sampler is None:
        sampler = (
            RandomSampler(dataset, generator=kwargs.get("generator"))
            if shuffle
            else SequentialSampler(dataset)
        )
    return BatchSampler(sampler, kwargs.pop("batch_size", 1), kwargs.pop("drop_last", False))
