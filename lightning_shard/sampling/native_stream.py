"""Streams that shard themselves: the protocol, its detection, and one process's share (docs/DESIGN.md,
"Streaming data"). Process ``r`` iterates ``dataset.shard(N, r)`` and its ``DataLoader`` worker ``w`` of ``W``
``share.shard(W, w)``, so the stream is read once in total; a dataset that splits itself is passed through.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any, Final, Literal, Protocol, TypeAlias, get_args, runtime_checkable

from torch.utils.data import IterableDataset, get_worker_info

from lightning_shard.sampling.samplers import pass_epoch
from lightning_shard.sampling.self_split import SelfSplit

IterableSharding: TypeAlias = Literal["auto", "native", "stride"]
"""The values of the ``iterable_sharding`` option: how a user asks a stream to be split."""
ITERABLE_SHARDING: tuple[IterableSharding, ...] = get_args(IterableSharding)

StreamKind: TypeAlias = Literal["iterable", "native-stream", "self-split-stream"]
"""How a process gets its part of a stream, as a loader's state records it (its ``sampler``): strided, its own
share, or the dataset's own split by rank. The values are what saved states hold; the code uses the names."""
STRIDED_STREAM: Final = "iterable"
NATIVE_STREAM: Final = "native-stream"
SELF_SPLIT_STREAM: Final = "self-split-stream"
STREAM_KINDS: tuple[StreamKind, ...] = (STRIDED_STREAM, NATIVE_STREAM, SELF_SPLIT_STREAM)
NATIVE_STREAM_KINDS: tuple[StreamKind, ...] = (NATIVE_STREAM, SELF_SPLIT_STREAM)
"""The kinds a ``NativeStreamShard`` reads: a share of its own, which the loader itself resumes."""


@runtime_checkable
class ShardableStream(Protocol):
    """An iterable dataset that can hand out disjoint parts of itself (the README's "Streaming data").

    ``n_shards`` is the number of pieces the stream is made of (files, generator arguments, ...);
    ``shard(num_shards, index)`` returns the ``index``-th of ``num_shards`` groups of whole pieces,
    for ``num_shards <= n_shards``, as an iterable dataset that implements this protocol again (so
    that ``DataLoader`` workers can split a process's share the same way). The groups of one
    ``num_shards`` partition the stream, and iterating a group twice in the same epoch yields the same
    elements in the same order (which exact resumption relies on). Hugging Face
    ``datasets.IterableDataset`` implements it.
    """

    @property
    def n_shards(self) -> int:
        """How many pieces the stream is made of: at most this many processes (times workers) can share it."""

    def shard(self, num_shards: int, index: int) -> Any:
        """The ``index``-th of ``num_shards`` disjoint groups of whole pieces, itself a ``ShardableStream``.

        Args:
            num_shards: how many groups to split the stream into (at most ``n_shards``).
            index: which group, from 0 to ``num_shards - 1``.
        """


class StreamShardingWarning(UserWarning):
    """``iterable_sharding="auto"`` fell back to striding (every process reads the whole stream).

    Issued once, on rank 0, when a loader is prepared; filter it with
    ``warnings.filterwarnings("ignore", category=StreamShardingWarning)`` when striding is intended. Its
    message says why the stream cannot be split natively, and how to make it so.
    """


class NativeStreamShard(IterableDataset):
    """This process's share of a stream that shards itself, or a stream that splits itself (passed through).

    It has no length on purpose: shares differ in length, and a loader with a per-process length
    would let each process stop at its own (the loader's end agreement decides when all stop).

    Args:
        dataset: the user's iterable dataset.
        kind: ``"native-stream"`` (iterate ``dataset.shard(N, r)``) or ``"self-split-stream"`` (iterate
            ``dataset``).
        num_processes: ``N``, the number of data-parallel processes.
        process_index: ``r``, this process's index.
        batch_size: the user's batch size (global with ``split_batches``), recorded for the state.
        split_batches: whether ``batch_size`` is global.
        library: how a ``"self-split-stream"`` splits itself (``loaders/kinds.py`` recognises it).
        workers_shard: whether the ``DataLoader`` workers of a process split its share with ``shard()``
            (``False``: the share splits itself among workers, as a Hugging Face dataset does).

    Raises:
        ValueError: on any other ``kind``.
    """

    def __init__(
        self,
        dataset: Any,
        kind: StreamKind | None,
        num_processes: int,
        process_index: int,
        *,
        batch_size: int | None = None,
        split_batches: bool = False,
        library: SelfSplit | None = None,
        workers_shard: bool = False,
    ) -> None:
        if kind is None or kind not in NATIVE_STREAM_KINDS:
            raise ValueError(
                f"`kind` must be {NATIVE_STREAM!r} or {SELF_SPLIT_STREAM!r}, got {kind!r}. Let `prepare_data_loader` build the share "
                "(its `iterable_sharding` option chooses)."
            )
        self.dataset = dataset
        self.kind: StreamKind = kind
        self.num_processes = num_processes
        self.process_index = process_index
        self.batch_size = batch_size
        self.split_batches = split_batches
        self.share = dataset.shard(num_processes, process_index) if kind == NATIVE_STREAM else dataset
        self.library = library
        self.workers_shard = workers_shard and kind == NATIVE_STREAM
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Record ``epoch`` and forward it to the share (a shuffled stream reorders by it)."""
        self.epoch = epoch
        if self.library is not None:
            self.library.set_epoch(epoch)
        else:
            pass_epoch(self.share, epoch)

    def before_pass(self) -> None:
        """In the loader's process, before each pass over the share (``SelfSplit.before_pass``)."""
        if self.library is not None:
            self.library.before_pass(self.epoch)

    def __iter__(self) -> Iterator[Any]:
        if get_worker_info() is None:
            # NOTE: a stream that advances its own epoch when a pass ends (LitData's) is set back, so every
            # pass of an epoch (padding restarts the share) reads the same order. Not in a worker: its copy
            # is fresh for each pass, or (persistent) the stream's own epoch sharing must not be undone.
            self.set_epoch(self.epoch)
        return iter(worker_part(self.share) if self.workers_shard else self.share)


def worker_part(share: Any) -> Any:
    """What this ``DataLoader`` worker reads of ``share``, split among the workers by ``shard()``: all of it
    outside workers, else its group."""
    info = get_worker_info()
    if info is None or info.num_workers == 1:
        return share
    groups = min(info.num_workers, share.n_shards)
    return share.shard(groups, info.id) if info.id < groups else ()


class WorkerSplitStream(IterableDataset):
    """A natively shardable stream read whole by one process, split among its ``DataLoader`` workers with
    ``shard()`` as a process's share is (dispatch: process 0 reads the whole stream)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def set_epoch(self, epoch: int) -> None:
        """Forward ``epoch`` to the dataset when it takes one."""
        pass_epoch(self.dataset, epoch)

    def __iter__(self) -> Iterator[Any]:
        return iter(worker_part(self.dataset))


class SizedWorkerSplitStream(WorkerSplitStream):
    """``WorkerSplitStream`` of a dataset with a length: the same length."""

    def __len__(self) -> int:
        return len(self.dataset)


def split_among_workers(dataset: Any) -> Any:
    """``dataset`` read whole by one process, split among its workers by ``shard()`` (``WorkerSplitStream``)."""
    return SizedWorkerSplitStream(dataset) if isinstance(dataset, Sized) else WorkerSplitStream(dataset)
