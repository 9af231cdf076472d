"""Streams that shard themselves: the protocol, its detection, and one process's share (docs/DESIGN.md,
"Streaming data").

Striding (``IterableDatasetShard``) makes every process read the whole stream and keep ``1/N`` of it.
A dataset that can split itself is read once in total instead: process ``r`` iterates
``dataset.shard(N, r)`` and, with ``DataLoader`` workers, worker ``w`` of ``W`` iterates
``share.shard(W, w)`` (a Hugging Face ``datasets.IterableDataset`` splits its share among workers
itself). A dataset that already splits itself by rank is passed through untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeAlias, get_args, runtime_checkable

from torch.utils.data import IterableDataset, get_worker_info

from lightning_shard.log import warn
from lightning_shard.sampling import litdata_stream, mosaic_stream, webdataset_stream
from lightning_shard.sampling.self_split import Recogniser, SelfSplit, declared

IterableSharding: TypeAlias = Literal["auto", "native", "stride"]
"""The values of the ``iterable_sharding`` option: how a user asks a stream to be split."""
ITERABLE_SHARDING: tuple[IterableSharding, ...] = get_args(IterableSharding)

StreamKind: TypeAlias = Literal["iterable", "native-stream", "self-split-stream"]
"""How a process gets its part of a stream, as a loader's state records it (its ``sampler``): strided
(every process reads the whole stream; ``iterable_sharding="stride"`` asks for it), its own share
(``"native"``), or the dataset's own split by rank. NOTE: the values are what saved states hold (0.1
recorded a strided stream as ``"iterable"``), so they stay; the names below are the ones the code uses."""
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
        ...

    def shard(self, num_shards: int, index: int) -> Any:
        """The ``index``-th of ``num_shards`` disjoint groups of whole pieces, itself a ``ShardableStream``.

        Args:
            num_shards: how many groups to split the stream into (at most ``n_shards``).
            index: which group, from 0 to ``num_shards - 1``.
        """
        ...


@dataclass(frozen=True)
class StreamSharding:
    """How one stream is split (``kind``) and why."""

    kind: StreamKind
    reason: str
    library: SelfSplit | None = None
    """How a stream that splits itself does it (``SELF_SPLIT_STREAM`` only)."""


def choose_stream_sharding(
    dataset: Any, mode: IterableSharding, num_processes: int, num_workers: int = 0
) -> StreamSharding:
    """Resolve ``iterable_sharding`` (``mode``) for ``dataset`` on ``num_processes`` processes.

    Raises:
        ValueError / TypeError: ``"stride"`` on a dataset that splits itself by rank (it would be
            split twice); ``"native"`` on a dataset that cannot give each process a shard; a native
            share that ``num_workers`` workers cannot split.
    """
    splits = self_split(dataset)
    if splits is not None:
        if mode == "stride" and num_processes > 1:
            raise ValueError(
                f"`iterable_sharding='stride'` on a dataset that {splits.reason}: every process would keep "
                f"1/{num_processes} of its own 1/{num_processes}. Use `iterable_sharding='auto'` (it is passed "
                "through), or give the dataset unsplit."
            )
        return StreamSharding(SELF_SPLIT_STREAM, splits.reason, splits)
    if num_processes == 1 or mode == "stride":
        return StreamSharding(
            STRIDED_STREAM, "one process" if num_processes == 1 else "`iterable_sharding='stride'`"
        )
    missing = _cannot_shard(dataset, num_processes)
    if missing is None:
        _check_workers_can_split(dataset, num_processes, num_workers)
        return StreamSharding(NATIVE_STREAM, f"{dataset.n_shards} shards over {num_processes} processes")
    if mode == "native":
        error = TypeError if "does not implement" in missing else ValueError
        raise error(
            f"`iterable_sharding='native'`, but the dataset ({type(dataset).__name__}) cannot be read natively: "
            f"{missing}. Give it "
            "`n_shards` and `shard(num_shards, index)` with at least one shard per process (see the README, "
            "\"Streaming data\"), or use `iterable_sharding='auto'` to fall back to striding."
        )
    return StreamSharding(STRIDED_STREAM, missing)


def say_fallback(sharding: StreamSharding, num_processes: int, process_index: int) -> None:
    """Tell the user once, on rank 0, why ``"auto"`` strides the stream (every process reads all of it)."""
    asked = sharding.reason.startswith("`iterable_sharding")
    if process_index != 0 or num_processes == 1 or sharding.kind != STRIDED_STREAM or asked:
        return
    # NOTE: the warnings module shows each distinct message once per process, so no registry of our own.
    warn(
        f"lightning_shard: every process reads the whole iterable dataset and keeps 1/{num_processes} of it, "
        f"because {sharding.reason}. That needs the same stream on every process, which the processes check "
        "at each epoch's first batch. To read each sample once in the job, give the dataset `n_shards` and "
        '`shard(num_shards, index)` (README, "Streaming data"), or, if it splits itself by rank, declare '
        "`splits_by_rank = True` on it; pass `iterable_sharding='stride'` to keep striding without this message.",
        StreamShardingWarning,
        stacklevel=4,
    )


class StreamShardingWarning(UserWarning):
    """``iterable_sharding="auto"`` fell back to striding (every process reads the whole stream).

    Issued once, on rank 0, when a loader is prepared; filter it with
    ``warnings.filterwarnings("ignore", category=StreamShardingWarning)`` when striding is intended.
    """

    def __init__(self, message: str) -> None:
        """
        Args:
            message: why the stream cannot be split natively, and how to make it so.
        """
        super().__init__(message)


def _cannot_shard(dataset: Any, num_processes: int) -> str | None:
    """Why ``dataset`` cannot give each of ``num_processes`` processes a shard, or ``None`` if it can."""
    if not isinstance(dataset, ShardableStream):
        return "it does not implement `n_shards` and `shard(num_shards, index)`"
    shards = dataset.n_shards
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < num_processes:
        return f"it has {shards} shards for {num_processes} processes"
    return None


def _check_workers_can_split(dataset: Any, num_processes: int, num_workers: int) -> None:
    if num_workers <= 1 or is_hugging_face(dataset):
        return
    share = dataset.shard(num_processes, 0)
    if not isinstance(share, ShardableStream):
        raise TypeError(
            f"`{type(dataset).__name__}.shard(num_shards, index)` returned a {type(share).__name__}, which has no "
            f"`n_shards` / `shard`, so the {num_workers} `DataLoader` workers of a process cannot split its share "
            "(each would read all of it). Return a dataset that implements the protocol again, or use "
            "`num_workers=0`."
        )


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
    """How ``dataset`` already splits itself by rank (then it must not be sharded again), or ``None``.

    Recognised: ``splits_by_rank = True`` on the dataset (declared), a Hugging Face dataset passed
    through ``datasets.distributed.split_dataset_by_node``, LitData's streaming datasets, webdataset pipelines
    split by ``split_by_node``, and mosaicml-streaming's ``StreamingDataset``.
    """
    for recognise in SELF_SPLITTING:
        found = recognise(dataset)
        if found is not None:
            return found
    return None


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
        library: how a ``"self-split-stream"`` splits itself (default: as ``self_split`` recognises it).

    Raises:
        ValueError: on any other ``kind``.
    """

    def __init__(
        self,
        dataset: Any,
        kind: Literal["native-stream", "self-split-stream"],
        num_processes: int,
        process_index: int,
        *,
        batch_size: int | None = None,
        split_batches: bool = False,
        library: SelfSplit | None = None,
    ) -> None:
        if kind not in NATIVE_STREAM_KINDS:
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
        self.library = library if library is not None or kind == NATIVE_STREAM else self_split(dataset)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Record ``epoch`` and forward it to the share (a shuffled stream reorders by it)."""
        self.epoch = epoch
        if self.library is not None:
            self.library.set_epoch(epoch)
        elif callable(getattr(self.share, "set_epoch", None)):
            self.share.set_epoch(epoch)

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
        return iter(worker_part(self.share, self.kind))


def worker_part(share: Any, kind: StreamKind) -> Any:
    """What this ``DataLoader`` worker reads of ``share``: all of it outside workers, else its group."""
    info = get_worker_info()
    if info is None or info.num_workers == 1 or kind == SELF_SPLIT_STREAM or is_hugging_face(share):
        # NOTE: a Hugging Face dataset (and a self-splitting one) splits itself among the workers.
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
        if callable(getattr(self.dataset, "set_epoch", None)):
            self.dataset.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        return iter(worker_part(self.dataset, NATIVE_STREAM))


class SizedWorkerSplitStream(WorkerSplitStream):
    """``WorkerSplitStream`` of a dataset with a length: the same length."""

    def __len__(self) -> int:
        return len(self.dataset)


def split_among_workers(dataset: Any, num_workers: int) -> Any:
    """``dataset`` as one process's workers should read it whole: split by ``shard()`` when it is natively
    shardable and does not split itself among workers, so no worker reads what another does."""
    splits_itself = self_split(dataset) is not None or is_hugging_face(dataset)
    if num_workers <= 1 or splits_itself or _cannot_shard(dataset, 1) is not None:
        return dataset
    return SizedWorkerSplitStream(dataset) if hasattr(dataset, "__len__") else WorkerSplitStream(dataset)
