"""``prepare_data_loader``: the single entry point that picks and builds the per-process loader."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader

from lightning_shard._checks import check_non_negative, check_split_batch_size
from lightning_shard.comm.collectives import broadcast_object, is_distributed, world_size
from lightning_shard.comm.topology import Topology, resolve_topology
from lightning_shard.loaders import kinds
from lightning_shard.loaders.base import built_as_user_class, loader_settings
from lightning_shard.loaders.position import SAME, SHORTEST, DataKind, LeftAsItIs, StreamEnds
from lightning_shard.loaders.shard import DataLoaderDispatcher, DataLoaderShard
from lightning_shard.options import ShardOptions
from lightning_shard.sampling.balance import BALANCED, EvenBatches
from lightning_shard.sampling.batch_shard import BatchSamplerShard
from lightning_shard.sampling.iterable_shard import IterableDatasetShard
from lightning_shard.sampling.native_stream import IterableSharding, NativeStreamShard, split_among_workers
from lightning_shard.sampling.own_sampler import recorded_batch_sampler
from lightning_shard.sampling.samplers import SampleShard, dataset_generator
from lightning_shard.sampling.torchdata_nodes import NodesGraph, root_loader


def prepare_data_loader(
    dataloader: DataLoader | Any,
    device: torch.device | str | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: Sequence[str] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: EvenBatches = True,
    slice_fn_for_dispatch: Callable[..., Any] | None = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
    torch_device_mesh: Any = None,
    iterable_sharding: IterableSharding = "auto",
    scalable_shuffle: bool = False,
) -> DataLoaderShard | DataLoaderDispatcher:
    """Wrap ``dataloader`` so this process yields only its part of every global batch.

    ``dataloader`` is a ``DataLoader``, or a torchdata.nodes ``Loader`` (or node graph) rooted in a
    ``SamplerWrapper`` or ``IterableWrapper``, sharded through its root (docs/DESIGN.md, "torchdata.nodes").
    ``num_processes`` / ``process_index`` default to the data-parallel size and rank of the running
    process group (or of ``torch_device_mesh``). The other parameters are the fields of
    ``ShardOptions``, documented there (and in the documentation's options table).

    Raises:
        TypeError: if ``dataloader`` is neither a ``DataLoader`` nor such a graph.
        ValueError: on any inconsistent option; the message names the parameter and the fix.
    """
    options = ShardOptions.pick(locals())
    topology = resolve_topology(num_processes, process_index, torch_device_mesh)
    return prepare_with_options(dataloader, options, topology, device=device, device_mesh=torch_device_mesh)


def prepare_with_options(
    dataloader: DataLoader | Any,
    options: ShardOptions,
    topology: Topology,
    *,
    device: torch.device | str | None = None,
    device_mesh: Any = None,
    uneven_streams: StreamEnds = SHORTEST,
) -> DataLoaderShard | DataLoaderDispatcher:
    """``prepare_data_loader`` for an already checked ``ShardOptions`` and topology; ``uneven_streams``: what a
    stream does with ``even_batches=False`` (``"shortest"`` for a training loop, ``"own"`` for predict)."""
    pipeline = None
    if not kinds.is_data_loader(dataloader):
        pipeline = _prepare_graph(dataloader, options, topology)
        dataloader = root_loader(pipeline)
        options = options.replace(dispatch_batches=False)
    if (options.use_seedable_sampler or options.scalable_shuffle) and topology.num_processes > 1:
        # NOTE: processes that shuffle differently read some samples twice and others never.
        options = options.replace(data_seed=_draw_seed(options, topology))
    kind = kinds.classify(dataloader, options, topology, uneven=uneven_streams)
    kind = kind if pipeline is None else dataclasses.replace(kind, pipeline=pipeline)
    if options.split_batches:
        check_split_batch_size(kinds.user_batch_size(dataloader), topology.num_processes, "dataloader")
    if kind.dispatch:
        # NOTE: dispatch under a mesh needs the whole mesh: global rank 0 sends every rank its index's slice.
        if device_mesh is not None and not topology.covers_world():
            raise ValueError(
                f"`dispatch_batches=True` with a `torch_device_mesh` of {device_mesh.mesh.numel()} ranks "
                f"{tuple(device_mesh.mesh_dim_names or ())} that does not span the {world_size()} ranks of the "
                "process group: global rank 0 loads and sends every rank the slice of its data-parallel index, so "
                "it must know them all. Pass the whole mesh (not a sub-mesh), or use `dispatch_batches=False`."
            )
        return _build_dispatcher(dataloader, kind, options, topology, device)
    parts = _stream_shard_parts if kind.stream else _map_shard_parts
    dataset, generator, kwargs = parts(dataloader, kind, options, topology)
    rng_types = options.rng_types
    if rng_types is not None:
        # NOTE: less "generator" when there is none to synchronise, as the reference.
        rng_types = [name for name in rng_types if name != "generator" or generator is not None]
    return built_as_user_class(
        DataLoaderShard,
        dataloader,
        dataset,
        device=device if options.put_on_device else None,
        rng_types=rng_types,
        synchronized_generator=generator,
        use_stateful_dataloader=options.use_stateful_dataloader,
        non_blocking=options.non_blocking,
        topology=topology,
        kind=kind,
        **kwargs,
        **loader_settings(dataloader),
    )


def _prepare_graph(graph: Any, options: ShardOptions, topology: Topology) -> NodesGraph:
    """The torchdata.nodes graph ``graph``, checked: it is sharded as the ``DataLoader`` of its root's items
    (``root_loader``) would be, each step's items then made a batch by the graph rebuilt over them
    (``loaders/source.py``): a ``DataLoaderShard``, never dispatched."""
    found = kinds.classify_iterable(graph, topology)
    if isinstance(found, LeftAsItIs):
        raise TypeError(
            f"`dataloader` must be a `torch.utils.data.DataLoader` or a torchdata.nodes `Loader` (or node graph) "
            f"rooted in a `SamplerWrapper` or `IterableWrapper`, got {found.name} ({found.reason}). Wrap your "
            "dataset first: `DataLoader(dataset, batch_size=...)`."
        )
    if options.dispatch_batches:
        raise ValueError(
            f"`dispatch_batches=True` with the torchdata.nodes graph `{found.describe()}`: process 0 would have to "
            "run the graph for every process and send each its part of every batch, which lightning_shard does "
            "not do for graphs. Use `dispatch_batches=False` (the default: each process runs the graph over its "
            "own part of the root's items), or return a `DataLoader` to have it dispatched."
        )
    return found


def _recorded(batch_sampler: Any, options: ShardOptions) -> Any:
    seedable, scalable, seed = options.use_seedable_sampler, options.scalable_shuffle, options.data_seed
    return recorded_batch_sampler(batch_sampler, seedable=seedable, scalable=scalable, data_seed=seed)


_Parts = tuple[Any, torch.Generator | None, dict[str, Any]]
"""A ``DataLoaderShard``'s dataset, synchronised generator and index source (or stream batching)."""


def _map_shard_parts(
    dataloader: DataLoader, kind: DataKind, options: ShardOptions, topology: Topology
) -> _Parts:
    per_sample = kind.index_shape == "samples"
    user = kinds.user_batch_sampler(dataloader)
    if per_sample:  # NOTE: `DataLoader(batch_size=None)`: one uncollated sample a step.
        user = BatchSampler(dataloader.sampler, 1, drop_last=False)
    # NOTE: one process never pads, as the reference (which does not shard then) does not; one sample a step
    # cannot be split, so a per-sample loader pads where it would balance.
    even = False if topology.num_processes == 1 else options.even_batches
    shard = BatchSamplerShard(
        _recorded(user, options),
        num_processes=topology.num_processes,
        process_index=topology.process_index,
        split_batches=options.split_batches,
        even_batches=True if per_sample and even == BALANCED else even,
    )
    index_source: dict[str, Any] = {"batch_sampler": shard}
    if kind.index_shape in ("samples", "sampler"):
        index_source = {"sampler": SampleShard(shard) if per_sample else shard, "batch_size": None}
    return dataloader.dataset, shard.kind.generator, {"data_seed": options.data_seed, **index_source}


def _stream_shard_parts(
    dataloader: DataLoader, kind: DataKind, options: ShardOptions, topology: Topology
) -> _Parts:
    """This process's part of a stream: its own share, or a stride of all of it."""
    batch_size, user = dataloader.batch_size, dataloader.dataset
    if batch_size is not None and options.split_batches:
        batch_size //= topology.num_processes
    generator = None
    if kind.source == "strided":
        dataset: Any = IterableDatasetShard(
            user,
            batch_size=dataloader.batch_size or 1,
            drop_last=dataloader.drop_last,
            num_processes=topology.num_processes,
            process_index=topology.process_index,
            split_batches=options.split_batches,
            even_batches=topology.num_processes > 1 and kind.stream_ends == SAME,
            fingerprinted=kind.fingerprinted,
        )
        generator = dataset_generator(user)
    else:
        if kind.library is not None:
            kind.library.split(topology.num_processes, topology.process_index, dataloader.drop_last)
            kind.library.check_batches(batch_size, dataloader.num_workers)
        dataset = NativeStreamShard(
            user,
            kind.state_name,
            topology.num_processes,
            topology.process_index,
            batch_size=dataloader.batch_size,
            split_batches=options.split_batches,
            library=kind.library,
            workers_shard=kind.workers_shard,
        )
    seed = _draw_seed(options, topology) if kind.fingerprinted else None
    kwargs = {"batch_size": batch_size, "drop_last": dataloader.drop_last, "data_seed": seed}
    return dataset, generator, kwargs


def _draw_seed(options: ShardOptions, topology: Topology) -> int | None:
    """The seed of a shuffle's or a strided stream's draws (``data_seed``, else process 0's default seed): the
    same on every process, so that they draw alike. A loader over part of the group keeps ``data_seed`` (a
    world-wide broadcast needs every rank here)."""
    if options.data_seed is not None or not is_distributed() or not topology.covers_world():
        return options.data_seed
    return int(broadcast_object(torch.initial_seed()))


def _build_dispatcher(
    dataloader: DataLoader, kind: DataKind, options: ShardOptions, topology: Topology, device: Any
) -> DataLoaderDispatcher:
    kwargs = loader_settings(dataloader)
    kwargs.pop("generator", None)
    # NOTE: `workers_shard` is a stream's only.
    dataset = split_among_workers(dataloader.dataset) if kind.workers_shard else dataloader.dataset
    if kind.stream:
        kwargs.update(batch_size=dataloader.batch_size, drop_last=dataloader.drop_last)
        if kind.library is not None and kind.library.dispatchable:
            kind.library.split(1, 0, dataloader.drop_last)  # NOTE: process 0 reads all of it.
    elif kind.index_shape == "samples":
        raise ValueError(
            "`dispatch_batches=True` with `DataLoader(batch_size=None)`: process 0 would load single, uncollated "
            "samples, which cannot be sliced into a part per process. Give the loader a `batch_size` (each "
            "process then gets its slice of every batch), or use `dispatch_batches=False` (each process loads "
            "its own samples)."
        )
    else:
        # NOTE: a one-process shard is the batch sampler itself, plus arithmetic skipping on resume.
        batch_sampler = _recorded(kinds.user_batch_sampler(dataloader), options)
        kwargs["batch_sampler"] = BatchSamplerShard(batch_sampler, even_batches=False)
    return built_as_user_class(
        DataLoaderDispatcher,
        dataloader,
        dataset,
        device=device,
        split_batches=options.split_batches,
        topology=topology,
        slice_fn=options.slice_fn_for_dispatch,
        non_blocking=options.non_blocking,
        use_stateful_dataloader=options.use_stateful_dataloader,
        kind=kind,
        even_batches=options.even_batches is not False,
        **kwargs,
    )


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
    """A loader that skips the first ``num_batches`` of its current epoch, by index only.

    For a prepared loader, a copy with a position of its own (iterating it never moves the original)
    that keeps every setting (device, ``non_blocking``, ``drop_last``, ``rng_types``, epoch); the skip
    applies to the current epoch only. A plain ``DataLoader`` becomes a
    one-process ``DataLoaderShard`` with the same settings.

    Raises:
        TypeError / ValueError: if ``dataloader`` is not a ``DataLoader`` or ``num_batches < 0``.
    """
    check_non_negative("num_batches", num_batches)
    if kinds.is_prepared(dataloader):
        loader, epoch = dataloader.fresh_copy(), dataloader.epoch
    else:
        loader, epoch = prepare_with_options(dataloader, ShardOptions(), Topology(1, 0)), None
    loader.resumption.skip(num_batches, epoch)
    return loader
