"""The sources of a stream (docs/DESIGN.md, "Streaming data", "Streams that split themselves"): a stream each
process reads its own share of, natively sharded (``shard(N, r)``) or split by rank by the dataset itself
(``ShareSource``); and a strided one, which every process reads whole, keeping its slice of each global batch
(``IterableDatasetShard``, ``StridedSource``). The rest of a strided epoch read by ``DataLoader`` workers and
continued on another number of processes is replayed as it was read (its workers, its global batch), not
skipped inside each worker, which would skip each worker's first elements rather than the epoch's ("Elastic
resume")."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader

from lightning_shard.comm.tree import batch_length
from lightning_shard.loaders.position import SHORTEST, Position, ShardingInfo
from lightning_shard.loaders.source import Batches, ShardSource, moving
from lightning_shard.loaders.stream_agreement import SameStreamCheck, isolated_fetches
from lightning_shard.loaders.streams import StreamRun
from lightning_shard.sampling.iterable_shard import IterableDatasetShard
from lightning_shard.sampling.native_stream import NativeStreamShard
from lightning_shard.sampling.stream_fingerprint import checked_step


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
        sized = self.library is None and isinstance(shard.dataset, Sized)
        return ShardingInfo(
            mode="shard",
            num_processes=shard.num_processes,
            split_batches=shard.split_batches,
            even_batches=self.stream.even_batches,
            drop_last=drop_last,
            batch_size=shard.batch_size,
            dataset_length=len(shard.dataset) if sized else None,
            sampler=self.loader.kind.state_name,
        )


def rows_of(loader: Any) -> Callable[[Any], int]:
    """How many samples a batch of ``loader`` holds (one a step with ``batch_size=None``, unless the dataset
    yields batches itself; a torchdata.nodes graph's source reads lists of its root's items)."""
    if loader.kind.pipeline is not None:
        return len
    library = loader.kind.library
    batched = library is not None and library.yields_batches
    return batch_length if loader.batch_size is not None or batched else lambda batch: 1


class ShareSource(StreamSource):
    """``shard``, this process's share: the processes agree on when their shares end (``StreamRun``); a
    start mid-epoch reads again and drops the batches the process consumed of its share (continuing in its
    padding where its share had ended), unless the library continues the position itself (its ``SelfSplit``
    was handed the state: the start then skips nothing)."""

    shard: NativeStreamShard

    def batches(self, start: Position) -> Batches:
        read = functools.partial(self._read, start.workers)
        return self.stream.batches(read(), read, rows_of(self.loader), start, moving(self.loader))

    def _read(self, workers: int | None) -> Iterator[Any]:
        """A pass over the share (the library told first, in this process: ``SelfSplit.before_pass``)."""
        self.shard.before_pass()
        return self.loader.user_batches(workers)

    def sharding(self) -> ShardingInfo:
        return self.stream_sharding(bool(self.loader.drop_last))


class StridedSource(StreamSource):
    """``shard`` read by the loader's ``DataLoader``; a start skips inside the shard (whole global batches
    read and dropped) or, with workers, drops batches after the ``DataLoader`` interleaves them; the rest of
    an epoch another number of processes began with workers is replayed in that epoch's order."""

    shard: IterableDatasetShard

    def batches(self, start: Position) -> Batches:
        loader, shard = self.loader, self.shard
        workers = loader.num_workers if start.workers is None else start.workers
        if start.read_before_resume and workers > 0:
            # NOTE: another number of processes read part of this epoch with workers: replay the epoch's
            # order (`loaders/strided_source.py`); skipping inside each worker would skip the wrong elements.
            loaded = self._replayed(start, workers)
        else:
            # NOTE: each worker iterates its own copy of the stream, so with workers the batches to skip are
            # dropped after the DataLoader interleaves them: exact, at the cost of collating them.
            discard = start.start if workers > 0 else 0
            read = functools.partial(self._read, start, start.start - discard)
            loaded = itertools.islice(self._draws_alike(read, start, workers), discard, None)
        pin, in_order = loader.pin_memory, getattr(loader, "in_order", True) or workers == 0
        check = SameStreamCheck(shard, pin=pin, in_order=in_order) if shard.fingerprinted else None
        restart = functools.partial(loader.user_batches, start.workers)
        return self.stream.batches(loaded, restart, rows_of(loader), start, moving(loader), check)

    def _draws_alike(self, make: Callable[[], Iterator[Any]], start: Position, workers: int) -> Iterator[Any]:
        """``make()``, drawing alike on every process where they compare what they read: the iterator made and
        (without workers) each compared fetch with torch's generator seeded from ``(seed, epoch, step)``, so the
        workers' seeds and the compared batches' draws are the same everywhere (``loaders/stream_agreement.py``)."""
        if not self.shard.fingerprinted:
            return make()
        return isolated_fetches(make, start, self.loader.draw_seed, 0, workers == 0, when=checked_step)

    def _read(self, start: Position, skip_steps: int) -> Iterator[Any]:
        """The user's batches from ``start``, the shard skipping ``skip_steps`` global batches after the elements
        another sharding consumed (taken when the ``DataLoader``'s iterator, created right after, iterates it)."""
        self.shard.resume(skip_steps=skip_steps, skip_elements=start.read_before_resume)
        return self.loader.user_batches(start.workers)

    def length_after(self, base: int) -> int:
        # NOTE: all stop at the shortest: the last process has the fewest elements of the last global batch.
        shard, batch_size = self.shard, self.loader.batch_size
        shortest = self.stream.stream_ends == SHORTEST
        elements = shard.length_after(base, shard.num_processes - 1 if shortest else None)
        if batch_size is None:
            return elements
        return elements // batch_size if self.loader.drop_last else -(-elements // batch_size)

    def sharding(self) -> ShardingInfo:
        return self.stream_sharding(self.shard.drop_last)

    def generator(self) -> torch.Generator | None:
        return self.loader.synchronized_generator

    def _replayed(self, start: Position, workers: int) -> Iterator[Any]:
        """This process's batches of the rest of an epoch that ``workers`` workers read for ``start``'s
        ``steps_before_resume`` steps (its ``read_before_resume`` elements), of which this shard (this topology)
        already took ``start.start`` steps."""
        shard, loader, steps = self.shard, self.loader, start.steps_before_resume
        shard.seed_dataset_generator()
        # NOTE: the epoch's global batch read by its workers, as the user's settings say they read.
        settings = {name: getattr(loader, name) for name in _WORKER_SETTINGS}
        settings.update(batch_size=start.read_before_resume // steps, drop_last=shard.drop_last)
        rest = shard.over(_replay(shard.dataset, steps, num_workers=workers, **settings))
        rest.resume(skip_steps=start.start)
        # NOTE: read in this process, batched, collated and pinned as the loader does.
        return iter(DataLoader(rest, **{name: getattr(loader, name) for name in _BATCHING}))


_WORKER_SETTINGS = ("worker_init_fn", "multiprocessing_context", "prefetch_factor", "timeout")
"""The user's ``DataLoader`` settings that decide how the workers read; everything else is ours."""
_BATCHING = ("batch_size", "drop_last", "collate_fn", "pin_memory")
"""The loader's settings a replay's batches are made with in this process."""


def _replay(dataset: Any, skip_groups: int, **settings: Any) -> Iterator[Any]:
    """The elements of ``dataset`` in the order a ``DataLoader`` of ``settings`` (the epoch's workers, its
    global batch as ``batch_size``) delivered them, after the first ``skip_groups`` global batches (that
    ``DataLoader`` made, and its workers started, at the first element asked for)."""
    groups = DataLoader(dataset, collate_fn=list, **settings)
    for group in itertools.islice(groups, skip_groups, None):
        yield from group
