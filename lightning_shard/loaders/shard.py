"""The two loaders, real ``DataLoader`` subclasses reading from the source their kind of data has (docs/DESIGN.md,
"Real loader subclasses", "Kinds of data"): ``DataLoaderShard``, the per-process loader, and
``DataLoaderDispatcher``, where process 0 loads and every other process receives only its slice ("Scatter
dispatch", ``loaders/dispatch_source.py``)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, cast

import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler, default_collate, default_convert
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_shard.comm.collectives import is_distributed
from lightning_shard.comm.random_states import normalize_rng_types
from lightning_shard.comm.topology import Topology, resolve_topology
from lightning_shard.comm.tree import slice_batch
from lightning_shard.loaders.base import ResumableLoader, init_data_loader, loader_settings
from lightning_shard.loaders.dispatch_source import DispatchSource
from lightning_shard.loaders.kinds import classify
from lightning_shard.loaders.position import DataKind, StreamEnds
from lightning_shard.loaders.resumable import Resumption
from lightning_shard.loaders.source import EpochCursor, MapSource, PlainSource, ShardSource
from lightning_shard.loaders.streams import StreamRun
from lightning_shard.loaders.strided_source import ShareSource, StridedSource
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
            ``"shortest"`` or ``"own"``; ``None``: ``"same"`` or ``"pad"`` by the stream's kind (given, it
            replaces the kind's).
        kind: what kind of data it holds (``prepare_data_loader`` passes what it decided; ``None``: decided
            from ``dataset`` and the index source given, ``loaders/kinds.py``).
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
        kind: DataKind | None = None,
        **kwargs: Any,
    ) -> None:
        self.rng_types = normalize_rng_types(rng_types, synchronized_generator)
        self.kind = kind if kind is not None else classify(dataset, built=kwargs)
        if stream_ends is not None and self.kind.stream_ends is not None:
            self.kind = dataclasses.replace(self.kind, stream_ends=stream_ends)
        kwargs, self.cursor = _with_cursor(self.kind, dataset, kwargs)
        init_data_loader(self, dataset, **kwargs)
        self.device = None if device is None else torch.device(device)
        self.non_blocking = non_blocking
        self.synchronized_generator = synchronized_generator
        self.use_stateful_dataloader = use_stateful_dataloader
        self.topology = topology
        self.draw_seed = data_seed if data_seed is not None else torch.initial_seed()
        """The seed of the main-process fetches' draws when the loader has no generator (``loaders/stream_agreement.py``)."""
        self.source = _source(self)
        self.resumption = Resumption(self.source, skip_batches=skip_batches)

    def _copied_arguments(self) -> tuple[Any, dict[str, Any]]:
        """The index source (and generators) or iterable shard copied, the user's dataset shared."""
        part: Any = self.dataset  # NOTE: a stream's part holds the user's dataset
        user = part.dataset if self.kind.sharded_stream else part
        shared = {id(user): user}
        kwargs = dict(loader_settings(self))
        if self.kind.indexed:
            dataset, index = self.dataset, copy.deepcopy(cast(EpochCursor, self.cursor).batch_sampler, shared)
            by_batch = self.kind.index_shape == "batches"
            kwargs.update({"batch_sampler": index} if by_batch else {"sampler": index, "batch_size": None})
        else:
            dataset = copy.deepcopy(self.dataset, shared)
            kwargs.update(batch_size=self.batch_size, drop_last=self.drop_last)
        # NOTE: one memo for everything copied: a generator shared by the sampler, the loader (worker seeds)
        # and `synchronized_generator` stays one generator in the copy.
        kwargs.update(
            generator=copy.deepcopy(self.generator, shared),
            synchronized_generator=copy.deepcopy(self.synchronized_generator, shared),
            rng_types=list(self.rng_types),
            data_seed=self.draw_seed,
        )
        return dataset, kwargs


class StatefulDataLoaderShard(DataLoaderShard, StatefulDataLoader):
    """``DataLoaderShard`` backed by torchdata's ``StatefulDataLoader`` (``use_stateful_dataloader=True``);
    its state is the shard state (torchdata's own counts the batch this loader reads ahead, so it is not offered)."""


class DataLoaderDispatcher(ResumableLoader):
    """Iterates the user's loader on process 0 only and sends each process its part of each batch.

    Without ``split_batches``, ``N`` consecutive batches form a global batch; with it, each batch is
    one. Process ``r`` gets rows ``[r * k, (r + 1) * k)`` of the global batch (``k = rows // N``); an
    incomplete last global batch is completed with the first ``N`` rows of the epoch unless
    ``drop_last``. When process 0's data ends, every process stops at the same step. Under a mesh whose
    ranks share data-parallel indices (``topology.rank_indices``), global rank 0 loads and every other
    rank receives the slice of its index (docs/DESIGN.md, "What the mesh decides").

    Args:
        dataset: the user's dataset (iterated on process 0 only).
        device: where each slice is put (``None``: left where it is).
        split_batches: split each batch instead of joining ``N`` batches.
        skip_batches: steps to skip at the start of the first iteration.
        use_stateful_dataloader: back this loader by torchdata's ``StatefulDataLoader``: ``True`` makes
            the constructor return ``StatefulDataLoaderDispatcher`` (``stateful_loader_class(cls)``).
        slice_fn: ``slice_fn(batch, slice, process_index=, num_processes=)``; default cuts every tensor
            and sequence along dimension 0.
        non_blocking: asynchronous host-to-device copies.
        num_processes: defaults to the running process group's size.
        process_index: defaults to the running process group's rank.
        topology: the data-parallel topology (``prepare_data_loader`` passes it); when given, it is used
            instead of ``num_processes`` / ``process_index``.
        kind: what kind of data it holds (``prepare_data_loader`` passes what it decided; ``None``: decided
            from ``dataset``).
        even_batches: complete an incomplete last global batch with the epoch's first rows (the reference
            does); ``False``: its real rows only, shared as map-style shards share them (a process may get a
            short batch or none).
        **kwargs: any other ``DataLoader`` argument (a ``batch_sampler`` for map-style data).

    Raises:
        ValueError: if several processes are asked for without a running process group.
    """

    topology: Topology

    def __init__(
        self,
        dataset: Any,
        device: torch.device | str | None = None,
        split_batches: bool = False,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        slice_fn: Any = None,
        non_blocking: bool = False,
        *,
        num_processes: int | None = None,
        process_index: int | None = None,
        topology: Topology | None = None,
        kind: DataKind | None = None,
        even_batches: bool = True,
        **kwargs: Any,
    ) -> None:
        topology = topology if topology is not None else resolve_topology(num_processes, process_index)
        if topology.num_processes > 1 and not is_distributed():
            raise ValueError(
                f"`dispatch_batches=True` with `num_processes={topology.num_processes}` needs a running "
                "torch.distributed process group to send batches over. Call `torch.distributed.init_process_group` "
                "first (Lightning's strategy does), or use `dispatch_batches=False`."
            )
        self.kind = kind if kind is not None else classify(dataset, dispatch=True, built=kwargs)
        if self.kind.indexed:
            self.cursor = kwargs["batch_sampler"] = EpochCursor(kwargs["batch_sampler"])
        init_data_loader(self, dataset, **kwargs)
        self.device = None if device is None else torch.device(device)
        self.split_batches = split_batches
        self.slice_fn = slice_fn or slice_batch
        self.non_blocking = non_blocking
        self.use_stateful_dataloader = use_stateful_dataloader
        self.topology = topology
        self.even_batches = even_batches
        self.source: DispatchSource = DispatchSource(self)
        self.resumption = Resumption(self.source, skip_batches=skip_batches)

    @property
    def num_processes(self) -> int:
        return self.topology.num_processes

    @property
    def process_index(self) -> int:
        return self.topology.process_index

    @property
    def bytes_received(self) -> int:
        """Bytes this process received from process 0 so far (0 on process 0)."""
        source = self.source
        return 0 if source.serves else sum(channel.bytes_moved for channel in source.channels.values())

    def _copied_arguments(self) -> tuple[Any, dict[str, Any]]:
        """The batch sampler (and its sampler and generator) copied, the dataset shared."""
        kwargs = loader_settings(self)
        kwargs.pop("generator", None)
        if self.kind.indexed:
            index = cast(EpochCursor, self.cursor).batch_sampler
            kwargs["batch_sampler"] = copy.deepcopy(index, {id(self.dataset): self.dataset})
        else:
            kwargs.update(batch_size=self.batch_size, drop_last=self.drop_last)
        kwargs.update({name: getattr(self, name) for name in ("split_batches", "slice_fn", "even_batches")})
        return self.dataset, kwargs


class StatefulDataLoaderDispatcher(DataLoaderDispatcher, StatefulDataLoader):
    """``DataLoaderDispatcher`` backed by torchdata's ``StatefulDataLoader``; its state is the shard state."""


def _source(loader: DataLoaderShard) -> ShardSource:
    """The loader's source of batches (of a torchdata.nodes graph's root items), by its kind."""
    kind, dataset = loader.kind, cast(Any, loader.dataset)  # NOTE: a stream's shard, as its kind says
    if kind.indexed:  # NOTE: `_with_cursor` put the cursor where the kind says
        return MapSource(loader, cast(EpochCursor, loader.cursor))
    if kind.source in ("map", "plain"):
        return PlainSource(loader)
    # NOTE: whether every rank of the default group iterates a loader of this topology.
    topology = loader.topology or Topology(dataset.num_processes, dataset.process_index)
    spans = is_distributed() and topology.covers_world()
    stream = StreamRun(kind, dataset.num_processes, dataset.process_index, spans_group=spans)
    return (ShareSource if kind.source == "shares" else StridedSource)(loader, dataset, stream)


def _with_cursor(
    kind: DataKind, dataset: Any, kwargs: dict[str, Any]
) -> tuple[dict[str, Any], EpochCursor | None]:
    """The ``DataLoader`` arguments with the index source routed through an ``EpochCursor`` (map-style data,
    where the kind says it goes), or a strided stream's collate passing its fingerprint on; and that cursor."""
    kwargs = dict(kwargs)
    if kind.fingerprinted and not isinstance(kwargs.get("collate_fn"), CollateFingerprinted):
        collate = kwargs.get("collate_fn")
        default = default_collate if kwargs.get("batch_size", 1) is not None else default_convert
        kwargs["collate_fn"] = CollateFingerprinted(default if collate is None else collate)
    cursor = None
    if kind.indexed:
        slot = "batch_sampler" if kind.index_shape == "batches" else "sampler"
        index = kwargs.get(slot)
        index = index if index is not None else _default_batch_sampler(dataset, kwargs)
        cursor = kwargs[slot] = EpochCursor(index)
    return kwargs, cursor


def _default_batch_sampler(dataset: Any, kwargs: dict[str, Any]) -> BatchSampler:
    """The batch sampler ``DataLoader`` would build from ``batch_size`` / ``shuffle`` / ``sampler``."""
    sampler, shuffle = kwargs.pop("sampler", None), kwargs.pop("shuffle", None)
    if sampler is None and shuffle:
        sampler = RandomSampler(dataset, generator=kwargs.get("generator"))
    elif sampler is None:
        sampler = SequentialSampler(dataset)
    return BatchSampler(sampler, kwargs.pop("batch_size", 1), kwargs.pop("drop_last", False))
