"""The source of a ``DataLoaderDispatcher``: process 0 reads the user's loader, cuts each global batch into a
slice per process and sends the others theirs (docs/DESIGN.md, "Scatter dispatch")."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sized
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from lightning_shard.comm.collectives import communication_device
from lightning_shard.comm.tree import batch_length, concatenate, same_layout, send_to_device, slice_batch
from lightning_shard.comm.wire import Channel, Status
from lightning_shard.loaders.position import Position, ShardingInfo
from lightning_shard.loaders.source import Batches, BatchSource
from lightning_shard.loaders.state import decode_generator_state
from lightning_shard.sampling.balance import chunk
from lightning_shard.sampling.batch_shard import marked_last
from lightning_shard.sampling.samplers import dataset_generator, pass_epoch


class DispatchSource(BatchSource):
    """Process 0's global batches, cut and sent; every other process receives its slices. A start skips whole
    batches of the user's loader: by index where its kind reads by index (map-style data, through the loader's
    cursor), else (a stream) read and dropped."""

    def __init__(self, loader: Any) -> None:
        super().__init__(loader)
        self.channels: dict[int, Channel] = {}
        self.by_index: bool = loader.kind.indexed
        """Whether the loader reads by index, through its ``EpochCursor`` (its kind says)."""
        topology = loader.topology
        self.serves = topology.process_index == 0 if topology.rank_indices is None else dist.get_rank() == 0
        """Whether this process loads: process 0, or global rank 0 under a mesh that shares indices."""

    def batches(self, start: Position) -> Batches:
        return self._serve(start) if self.serves else self._receive()

    def _channel(self, peer: int) -> Channel:
        if peer not in self.channels:
            self.channels[peer] = Channel(peer, communication_device())
        return self.channels[peer]

    def _serve(self, start: Position) -> Batches:
        """Process 0: build global batches, send each peer its slice, yield our own."""
        loader, last = self.loader, False
        # NOTE: our own slice's index, and each other rank with its slice's index (a mesh's, or its own).
        indices = loader.topology.rank_indices or range(loader.num_processes)
        own, peers = indices[0], [(peer, index) for peer, index in enumerate(indices) if peer != 0]
        try:
            for batch, last in self._global_slices(start):
                for peer, index in peers:
                    if batch[index] is None:  # NOTE: `even_batches=False`: no rows left for it
                        self._channel(peer).send_status(Status.STOP)
                    else:
                        self._channel(peer).send_batch(batch[index], last)
                if batch[own] is not None:
                    yield send_to_device(batch[own], loader.device, loader.non_blocking), last
            if not last:
                for peer, _ in peers:
                    self._channel(peer).send_status(Status.STOP)
        except Exception as error:
            for peer, _ in peers:
                self._channel(peer).send_status(Status.ERROR, f"{type(error).__name__}: {error}")
            raise
        finally:
            # NOTE: sends are asynchronous; each must be delivered before its buffers go, also when the
            # iteration is abandoned (Lightning stops after `len(loader)` batches) and this is closed.
            for channel in self.channels.values():
                channel.flush()

    def _receive(self) -> Batches:
        """Other processes: receive slices from process 0 until it says the epoch is over."""
        channel, loader, status = self._channel(0), self.loader, None
        while status is not Status.LAST:
            status, batch = channel.receive()
            if status is Status.ERROR:
                raise RuntimeError(f"Process 0 failed while loading the batch to dispatch: {batch}")
            if status is Status.STOP:
                return
            yield send_to_device(batch, loader.device, loader.non_blocking), status is Status.LAST

    def _global_slices(self, start: Position) -> Iterator[tuple[list[Any], bool]]:
        """Each global batch cut into ``N`` slices, and whether it is the epoch's last."""
        skipped = start.start * self.sharding().step_size
        head: list[Any] = []  # NOTE: the first batches a resumed epoch skipped, once read
        first: list[Any] = []
        for current, last in marked_last(self._global_batches(start, skipped, head)):
            first = first or current
            yield self._cut(current, last, functools.partial(self._head_rows, head, first)), last

    def _global_batches(self, start: Position, skipped: int, head: list[Any]) -> Iterator[list[Any]]:
        """The batches of the user's loader that form each global batch (``N``, or 1 with ``split_batches``);
        the first of those a resumed epoch skips go into ``head``."""
        loader = self.loader
        group = 1 if loader.split_batches else loader.num_processes
        if self.by_index:
            # NOTE: the steps already taken go in `start`, not `consumed`, so `len()` keeps counting the
            # whole epoch (from `read_before_resume`), as DataLoaderShard's does; Lightning adds its restored
            # count to it.
            head += self._head_by_index(start, start.read_before_resume + skipped)
            loader.cursor.rewind(skipped, start.read_before_resume)
        source = loader.user_batches(start.workers)
        if not self.by_index:
            head += list(itertools.islice(source, start.read_before_resume + skipped))[:group]
        while True:
            batches = list(itertools.islice(source, group))
            if not batches or (len(batches) < group and self.drop_last):
                return
            yield batches

    @property
    def drop_last(self) -> bool:
        """Whether the user's loader drops its incomplete last batch (its batch sampler's, read by index)."""
        return bool(self.loader.cursor.drop_last if self.by_index else self.loader.drop_last)

    def _cut(self, batches: list[Any], last: bool, head: Callable[[], Any]) -> list[Any]:
        """The ``N`` slices of a global batch: an incomplete last one is completed with the epoch's ``head()``
        rows; one before it whose rows ``N`` does not divide (a bucketing sampler's short batch) is cut into
        parts differing by at most one row, every row once."""
        loader, n = self.loader, self.loader.num_processes
        # NOTE: ``N`` batches of one layout are the slices of their concatenation: no need to join them.
        if loader.slice_fn is slice_batch and len(batches) == n > 1 and same_layout(batches):
            return batches
        batch = _joined(batches)
        rows = batch_length(batch)
        if last and not self.drop_last and not loader.even_batches:
            return self._real_rows(batches, batch)
        if last and not self.drop_last and rows % n != 0:
            try:
                batch = concatenate([batch, head()])
            except ValueError as error:
                raise ValueError(
                    f"`dispatch_batches=True`: the epoch's last batch has {rows} rows, not a multiple of the "
                    f"number of processes ({n}), so it is completed with the epoch's first rows, but their "
                    f"tensors cannot be concatenated ({error.__cause__ or error}). Set `drop_last=True` on the "
                    "DataLoader, or collate every batch to the same trailing shapes."
                ) from error
            rows = (rows // n + 1) * n
        elif 0 < rows < n:
            raise ValueError(
                f"`dispatch_batches=True`: a global batch before the epoch's last has {rows} rows, fewer than "
                f"the {n} processes, so some would get none and the step could not be taken together. Have "
                "the batch sampler yield batches of at least as many samples as processes, or use "
                "`dispatch_batches=False`."
            )
        return [
            loader.slice_fn(batch, slice(*chunk(rows, n, r)), process_index=r, num_processes=n)
            for r in range(n)
        ]

    def _real_rows(self, batches: list[Any], batch: Any) -> list[Any]:
        """The last global batch's real rows as the shards of map-style data share them (``even_batches=False``):
        whole batches one a process, or the parts of a split one; ``None`` for a process left none."""
        loader, n, rows = self.loader, self.loader.num_processes, batch_length(batch)
        # NOTE: a bucketing sampler's batches (not only the epoch's last may be short): as its shards cut them.
        if loader.split_batches and self.by_index and not loader.cursor.kind.plain:
            bounds = [chunk(rows, n, r) for r in range(n)]
        elif loader.split_batches:
            width = self._width()
            bounds = [(r * width, min((r + 1) * width, rows)) for r in range(n)]
        else:
            ends = list(itertools.accumulate(batch_length(part) for part in batches))
            bounds = [(ends[r - 1] if r else 0, ends[r]) if r < len(ends) else (0, 0) for r in range(n)]
        return [
            loader.slice_fn(batch, slice(lo, hi), process_index=r, num_processes=n) if hi > lo else None
            for r, (lo, hi) in enumerate(bounds)
        ]

    # -- the contract's other parts -----------------------------------------------------------------
    def length_after(self, base: int) -> int:
        loader, n = self.loader, self.loader.num_processes
        whole = (
            loader.cursor.length_after(base) if self.by_index else max(DataLoader.__len__(loader) - base, 0)
        )
        if loader.split_batches and (loader.even_batches or self.drop_last):
            return whole
        if self.drop_last:
            return whole // n
        if loader.even_batches:
            return -(-whole // n)
        # NOTE: `even_batches=False`: the last global batch's real rows only, as `_real_rows` shares them.
        r = loader.topology.process_index
        if not loader.split_batches:
            return len(range(r, whole, n))
        return whole - (0 < self._last_rows(base) <= r * self._width())

    def _width(self) -> int:
        """Rows of a process's part of a whole batch (``split_batches``)."""
        n = self.loader.num_processes
        return (self.sharding().batch_size or n) // n

    def _last_rows(self, base: int) -> int:
        """Rows of the epoch's last batch after ``base`` batches (0: a whole batch, or not known: a bucketing
        sampler's last batch is cut among every process, as its shards cut it)."""
        info = self.sharding()
        if self.by_index:
            return int(self.loader.cursor.batch_sampler.short_last_batch(base))
        if info.dataset_length is None or not info.batch_size:
            return 0
        return max(info.dataset_length - base * info.batch_size, 0) % info.batch_size

    def sharding(self) -> ShardingInfo:
        loader, dataset = self.loader, self.loader.dataset
        return ShardingInfo(
            mode="dispatch",
            num_processes=loader.num_processes,
            split_batches=loader.split_batches,
            even_batches=loader.even_batches,
            drop_last=self.drop_last,
            batch_size=loader.cursor.batch_size if self.by_index else loader.batch_size,
            dataset_length=len(dataset) if isinstance(dataset, Sized) else None,
            sampler=loader.kind.state_name or (loader.cursor.kind.name if self.by_index else "none"),
        )

    def set_epoch(self, epoch: int) -> None:
        if self.by_index:
            self.loader.cursor.set_epoch(epoch)
        else:
            pass_epoch(self.loader.dataset, epoch)

    def generator(self) -> torch.Generator | None:
        """The sampler's generator, or an iterable dataset's (the reference's convention)."""
        return self.loader.cursor.kind.generator if self.by_index else dataset_generator(self.loader.dataset)

    def seeded(self) -> Any:
        return self.loader.cursor.kind.seeded if self.by_index else None

    def _head_by_index(self, start: Position, skipped: int) -> list[Any]:
        """The epoch's first batches holding ``N`` rows, fetched by index through the user's loader (when the
        epoch was resumed after ``skipped`` of them), the sampler's generator set back to the epoch's start
        meanwhile."""
        loader = self.loader
        if not skipped or loader.num_processes == 1 or self.drop_last:
            return []
        generator, at_start = self.generator(), start.generator_state
        now = generator.get_state() if generator is not None else None
        if generator is not None and at_start is not None:
            generator.set_state(decode_generator_state(at_start))
        batches: list[Any] = []
        try:
            loader.cursor.rewind()
            for batch in itertools.islice(loader.user_batches(), skipped):
                batches.append(batch)
                if sum(batch_length(read) for read in batches) >= loader.num_processes:
                    break
        finally:
            if generator is not None and now is not None:
                generator.set_state(now)
        return batches

    def _head_rows(self, head: list[Any], first: list[Any]) -> Any:
        """The epoch's first ``N`` rows, from the batches a resumed epoch skipped (``head``), then ``first``
        (this run's first global batch)."""
        loader, n = self.loader, self.loader.num_processes
        if sum(batch_length(batch) for batch in head) < n:
            head = [*head, *first]
        if loader.slice_fn is slice_batch and batch_length(head[0]) >= n:
            head = head[:1]
        return loader.slice_fn(_joined(head), slice(0, n), process_index=0, num_processes=n)


def _joined(batches: list[Any]) -> Any:
    return batches[0] if len(batches) == 1 else concatenate(batches)
