"""The one decision: what kind of data a loader holds, a ``DataKind``; the only code that inspects the types of
datasets, samplers and libraries (docs/DESIGN.md, "Kinds of data")."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeGuard

from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, IterableDataset

from lightning_shard.comm.topology import Topology
from lightning_shard.loaders.base import ResumableLoader
from lightning_shard.loaders.position import SHORTEST, DataKind, LeftAsItIs, StreamEnds, stream_ends_for
from lightning_shard.log import warn
from lightning_shard.options import ShardOptions
from lightning_shard.sampling import litdata_stream, mosaic_stream, webdataset_stream
from lightning_shard.sampling.batch_shard import BatchSamplerShard
from lightning_shard.sampling.iterable_shard import IterableDatasetShard
from lightning_shard.sampling.native_stream import (
    NATIVE_STREAM,
    SELF_SPLIT_STREAM,
    STRIDED_STREAM,
    NativeStreamShard,
    ShardableStream,
    StreamShardingWarning,
)
from lightning_shard.sampling.samplers import SampleShard
from lightning_shard.sampling.self_split import Recogniser, SelfSplit, declared
from lightning_shard.sampling.torchdata_nodes import NodesGraph, is_node_graph, read_graph


def classify(
    dataloader: Any,
    options: ShardOptions | None = None,
    topology: Topology | None = None,
    *,
    uneven: StreamEnds = SHORTEST,
    built: dict[str, Any] | None = None,
    dispatch: bool = False,
) -> DataKind:
    """The ``DataKind`` of the user's ``dataloader`` prepared with ``options`` for ``topology`` (``uneven``: a
    stream's ends without ``even_batches``); with ``built``, the ``DataLoader`` arguments of a loader the seed's
    constructors build directly over ``dataloader``, then a dataset or a shard of one: what it is built over
    decides (``dispatch``: a ``DataLoaderDispatcher``). Raises, naming the fix, on a ``DataLoader`` that is
    prepared or sharded already, or on a stream that cannot be read as asked (what is not a ``DataLoader`` was
    refused, or read as a torchdata.nodes graph's root, by ``prepare_with_options``)."""
    if built is not None:
        return _built(dataloader, built, dispatch)
    assert options is not None and topology is not None, "a loader to prepare is classified with its options"
    _check_unsharded(dataloader)
    dataset, num_processes = dataloader.dataset, topology.num_processes
    streamed = isinstance(dataset, IterableDataset)
    # NOTE: `dispatch_batches=None` dispatches an iterable dataset when `put_on_device`.
    dispatched = options.dispatch_batches
    dispatched = (options.put_on_device and streamed) if dispatched is None else dispatched
    if not streamed and isinstance(dataloader.sampler, BatchSampler):
        return DataKind("map", dispatched, "sampler")  # NOTE: a batch sampler passed as `sampler`
    if not streamed:
        return DataKind("map", dispatched, "samples" if dataloader.batch_sampler is None else "batches")
    if dispatched:
        return _dispatched_stream(dataset, num_processes)
    kind = _stream(dataloader, options, topology)
    ends = stream_ends_for(kind.source == "strided", bool(options.even_batches), uneven)
    # NOTE: checked unless declared `splits_by_rank = False` (random elements: their contents differ).
    declared_same = getattr(dataset, "splits_by_rank", None) is False
    fingerprinted = kind.source == "strided" and num_processes > 1 and not declared_same
    return dataclasses.replace(kind, stream_ends=ends, fingerprinted=fingerprinted)


def _built(dataset: Any, kwargs: dict[str, Any], dispatch: bool) -> DataKind:
    """The ``DataKind`` of a loader built directly over ``dataset`` with the ``DataLoader`` arguments
    ``kwargs``: a shard's kind is what it was built as; a dispatcher's map-style data is read by index when it
    is given a ``batch_sampler``."""
    if not dispatch and isinstance(dataset, IterableDatasetShard):
        ends = stream_ends_for(True, dataset.even_batches or dataset.num_processes == 1)
        return DataKind(
            "strided", state_name=STRIDED_STREAM, stream_ends=ends, fingerprinted=dataset.fingerprinted
        )
    if not dispatch and isinstance(dataset, NativeStreamShard):
        ends = stream_ends_for(False, True)
        return DataKind("shares", state_name=dataset.kind, library=dataset.library, stream_ends=ends)
    if isinstance(dataset, IterableDataset):
        return DataKind("strided", True, state_name=STRIDED_STREAM) if dispatch else DataKind("plain")
    sampler, batched = kwargs.get("sampler"), kwargs.get("batch_size", 1) is not None
    if kwargs.get("batch_sampler") is not None or (batched and not dispatch):
        return DataKind("map", dispatch, "batches")
    if dispatch or not isinstance(sampler, (SampleShard, BatchSampler)):
        return DataKind("map", dispatch)
    return DataKind("map", index_shape="samples" if isinstance(sampler, SampleShard) else "sampler")


def classify_iterable(iterable: Any, topology: Topology) -> NodesGraph | LeftAsItIs:
    """What a loop's iterable that is not a ``DataLoader`` is: a torchdata.nodes graph to shard through its root
    (``NodesGraph``), or one to leave as it is (declared ``splits_by_rank``, a ``MultiNodeWeightedSampler`` built
    for this process, or unknown: then checked at its first batch).

    Raises:
        TypeError / ValueError: on a graph with a node it does not know, or a ``MultiNodeWeightedSampler`` built
            for another rank or number of processes (``sampling/torchdata_nodes.py``).
    """
    name = type(iterable).__name__
    declared_split = getattr(iterable, "splits_by_rank", None)
    if isinstance(declared_split, bool):
        whole = "" if declared_split else ": every process reads all of it"
        return LeftAsItIs(name, f"it declares `splits_by_rank = {declared_split}`{whole}", checked=False)
    if not is_node_graph(iterable):
        stateful = all(
            callable(getattr(iterable, method, None)) for method in ("state_dict", "load_state_dict")
        )
        reason = "not a `DataLoader` nor a recognised pipeline"
        return LeftAsItIs(name, reason, checked=True, stateful=stateful)
    graph = read_graph(iterable)
    if graph.root_kind != "weighted":
        return graph
    rank, size = graph.root.rank, graph.root.world_size
    process_index, num_processes = topology.process_index, topology.num_processes
    if (rank, size) != (process_index, num_processes):
        raise ValueError(
            f"The `MultiNodeWeightedSampler` of `{graph.describe()}` was built for rank {rank} of {size} "
            f"(`rank={rank}`, `world_size={size}`), but this process is rank {process_index} of {num_processes} "
            "data-parallel processes, so the processes would not split the mix between them. Build it in "
            "`train_dataloader` with `rank=self.trainer.global_rank, world_size=self.trainer.world_size` (under "
            "tensor parallelism: the data-parallel rank and size), or root the graph in a `SamplerWrapper` to "
            "have it sharded."
        )
    reason = f"its `MultiNodeWeightedSampler` splits itself (rank {process_index} of {num_processes})"
    return LeftAsItIs(name, reason, checked=False)


def is_data_loader(value: object) -> TypeGuard[DataLoader]:
    """Whether ``value`` is a ``DataLoader`` (else a torchdata.nodes graph, or an iterable left as it is)."""
    return isinstance(value, DataLoader)


def is_prepared(value: object) -> TypeGuard[ResumableLoader]:
    """Whether ``value`` is a loader this package prepared (a ``DataLoaderShard`` or ``DataLoaderDispatcher``)."""
    return isinstance(value, ResumableLoader)


def user_batch_size(dataloader: DataLoader) -> int | None:
    """The user's batch size: the loader's, else its batch sampler's (``None``: one of its own without one)."""
    return dataloader.batch_size or getattr(user_batch_sampler(dataloader), "batch_size", None)


# -- map-style ------------------------------------------------------------------------------------------
def user_batch_sampler(dataloader: DataLoader) -> Any:
    """The user's batch sampler (also when it was passed as ``sampler`` with ``batch_size=None``)."""
    return dataloader.sampler if isinstance(dataloader.sampler, BatchSampler) else dataloader.batch_sampler


def _check_unsharded(dataloader: DataLoader) -> None:
    # NOTE: a `DataLoader`: what is not one is a torchdata.nodes graph, or refused, before it is classified.
    if isinstance(dataloader, ResumableLoader):
        raise ValueError(
            f"`dataloader` is already prepared ({type(dataloader).__name__}); preparing it again would "
            "shard it twice. Pass the original `DataLoader`."
        )
    for part in (user_batch_sampler(dataloader), dataloader.dataset):
        shards = (BatchSamplerShard, IterableDatasetShard, NativeStreamShard)
        if isinstance(part, shards) and part.num_processes > 1:
            raise ValueError(
                f"`dataloader` is built on a {type(part).__name__} with `num_processes={part.num_processes}`, "
                "which already shards it; preparing it would give each process a fraction of its share. "
                "Pass a `DataLoader` over the plain dataset and batch sampler."
            )
    sampler = getattr(user_batch_sampler(dataloader), "sampler", None)
    if isinstance(sampler, DistributedSampler) or hasattr(sampler, "num_replicas"):
        raise ValueError(
            f"`dataloader` already shards by rank: its sampler is a {type(sampler).__name__}. Sharding it "
            "again would give each process a fraction of its share. Use a plain sampler (e.g. "
            "`shuffle=True`), or, to keep sharding it yourself under Lightning, pass "
            "`Trainer(use_distributed_sampler=False)`: the strategy then leaves every loader as it is."
        )


# -- streams --------------------------------------------------------------------------------------------
def _stream(dataloader: DataLoader, options: ShardOptions, topology: Topology) -> DataKind:
    """How the stream of ``dataloader`` is split over the processes of ``topology`` (by ``options``'s
    ``iterable_sharding``); the first process says why it strides one it could not split."""
    dataset: Any = dataloader.dataset
    mode, num_processes = options.iterable_sharding, topology.num_processes
    splits = self_split(dataset)
    if splits is not None:
        if mode == "stride" and num_processes > 1:
            raise ValueError(
                f"`iterable_sharding='stride'` on a dataset that {splits.reason}: every process would keep "
                f"1/{num_processes} of its own 1/{num_processes}. Use `iterable_sharding='auto'` (it is passed "
                "through), or give the dataset unsplit."
            )
        return DataKind("shares", state_name=SELF_SPLIT_STREAM, reason=splits.reason, library=splits)
    if num_processes == 1 or mode == "stride":
        reason = "one process" if num_processes == 1 else "`iterable_sharding='stride'`"
        return DataKind("strided", state_name=STRIDED_STREAM, reason=reason)
    missing = _cannot_shard(dataset, num_processes)
    if missing is None:
        # NOTE: decided whatever the loader's workers: a resumed epoch may be read by the count it began with.
        workers_shard = not is_hugging_face(dataset)
        # NOTE: the dataset is a `ShardableStream` (`_cannot_shard`); its share is asked for only for workers.
        share = dataset.shard(num_processes, 0) if workers_shard and dataloader.num_workers > 1 else dataset
        if not isinstance(share, ShardableStream):
            raise TypeError(
                f"`{type(dataset).__name__}.shard(num_shards, index)` returned a {type(share).__name__}, which has no "
                f"`n_shards` / `shard`, so the {dataloader.num_workers} `DataLoader` workers of a process cannot split its share "
                "(each would read all of it). Return a dataset that implements the protocol again, or use "
                "`num_workers=0`."
            )
        reason = f"{dataset.n_shards} shards over {num_processes} processes"
        return DataKind("shares", state_name=NATIVE_STREAM, reason=reason, workers_shard=workers_shard)
    if mode == "native":
        error = TypeError if "does not implement" in missing else ValueError
        raise error(
            f"`iterable_sharding='native'`, but the dataset ({type(dataset).__name__}) cannot be read natively: "
            f"{missing}. Give it `n_shards` and `shard(num_shards, index)` with at least one shard per process "
            "(see the README, \"Streaming data\"), or use `iterable_sharding='auto'` to fall back to striding."
        )
    if topology.process_index == 0:
        # NOTE: the warnings module shows each distinct message once per process, so no registry of our own.
        warn(
            f"lightning_shard: every process reads the whole iterable dataset and keeps 1/{num_processes} of it, "
            f"because {missing}. That needs the same stream on every process, which the processes check "
            "at each epoch's first batch. To read each sample once in the job, give the dataset `n_shards` and "
            '`shard(num_shards, index)` (README, "Streaming data"), or, if it splits itself by rank, declare '
            "`splits_by_rank = True` on it; pass `iterable_sharding='stride'` to keep striding without this message.",
            StreamShardingWarning,
            stacklevel=5,
        )
    return DataKind("strided", state_name=STRIDED_STREAM, reason=missing)


def _dispatched_stream(dataset: Any, num_processes: int) -> DataKind:
    """A stream process 0 reads whole: one that splits itself by rank is refused unless it can be told to read
    everything; a natively shardable one is split among its workers with ``shard()``."""
    splits = self_split(dataset)
    if splits is not None and num_processes > 1 and not splits.dispatchable:
        raise ValueError(
            f"`dispatch_batches=True` over a dataset that {splits.reason}: process 0 loads for every process, but "
            f"this dataset gives process 0 only its own 1/{num_processes}, so the other parts would never be "
            "read. Use `dispatch_batches=False` (each process reads its own part, passed through), or give the "
            "dataset unsplit."
        )
    # NOTE: whatever the loader's workers: a resumed epoch may be read by the count it began with.
    workers_shard = splits is None and _cannot_shard(dataset, 1) is None and not is_hugging_face(dataset)
    return DataKind("strided", True, state_name=STRIDED_STREAM, library=splits, workers_shard=workers_shard)


def _cannot_shard(dataset: Any, num_processes: int) -> str | None:
    """Why ``dataset`` cannot give each of ``num_processes`` processes a shard, or ``None`` if it can."""
    if not isinstance(dataset, ShardableStream):
        return "it does not implement `n_shards` and `shard(num_shards, index)`"
    shards = dataset.n_shards
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < num_processes:
        return f"it has {shards} shards for {num_processes} processes"
    return None


def is_hugging_face(dataset: Any) -> bool:
    """Whether ``dataset`` is a Hugging Face ``datasets.IterableDataset`` (recognised without importing it)."""
    return any(
        cls.__name__ == "IterableDataset" and cls.__module__.startswith("datasets.")
        for cls in type(dataset).__mro__
    )


def _hugging_face_split(dataset: Any) -> SelfSplit | None:
    """A Hugging Face dataset passed through ``datasets.distributed.split_dataset_by_node``."""
    # NOTE: `split_dataset_by_node` records the rank on the dataset; `datasets` offers no public getter.
    if is_hugging_face(dataset) and getattr(dataset, "_distributed", None) is not None:
        return SelfSplit(dataset, "was split by `datasets.distributed.split_dataset_by_node`")
    return None


SELF_SPLITTING: tuple[Recogniser, ...] = (
    declared,
    _hugging_face_split,
    litdata_stream.recognise,
    webdataset_stream.recognise,
    mosaic_stream.recognise,
)
"""Who recognises a dataset that splits itself by rank, first match first (``self_split``)."""


def self_split(dataset: Any) -> SelfSplit | None:
    """How ``dataset`` already splits itself by rank (then it must not be sharded again; ``SELF_SPLITTING``
    recognises it), or ``None``."""
    return next(filter(None, (recognise(dataset) for recognise in SELF_SPLITTING)), None)
