"""``DataLoaderDispatcher``: process 0 loads, every other process receives only its slice (docs/DESIGN.md,
"Scatter dispatch")."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Generator, Iterator, Sized
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_shard._checks import check_non_negative
from lightning_shard.comm.collectives import communication_device, is_distributed
from lightning_shard.comm.topology import Topology, resolve_topology
from lightning_shard.comm.tree import batch_length, concatenate, same_layout, send_to_device, slice_batch
from lightning_shard.comm.wire import Channel, Status
from lightning_shard.loaders.base import LoaderSource, ResumableLoader, marked_last
from lightning_shard.loaders.cursor import EpochCursor
from lightning_shard.loaders.position import Position, ShardingInfo
from lightning_shard.loaders.resumable import Resumption
from lightning_shard.loaders.settings import loader_settings, sampler_kind
from lightning_shard.loaders.state import decode_generator_state
from lightning_shard.loaders.user_class import carry_user_attributes, init_data_loader
from lightning_shard.sampling.balance import chunk
from lightning_shard.sampling.own_sampler import generator_of


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
        **kwargs: any other ``DataLoader`` argument (a ``batch_sampler`` for map-style data).

    Raises:
        ValueError: if several processes are asked for without a running process group.
    """

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
        **kwargs: Any,
    ) -> None:
        skip_batches = check_non_negative("skip_batches", skip_batches)
        topology = topology if topology is not None else resolve_topology(num_processes, process_index)
        _check_group(topology)
        if kwargs.get("batch_sampler") is not None and not isinstance(dataset, IterableDataset):
            kwargs["batch_sampler"] = EpochCursor(kwargs["batch_sampler"])
        init_data_loader(self, dataset, **kwargs)
        self.device = None if device is None else torch.device(device)
        self.split_batches = split_batches
        self.slice_fn = slice_fn or slice_batch
        self.non_blocking = non_blocking
        self.use_stateful_dataloader = use_stateful_dataloader
        self.topology = topology
        self._channels: dict[int, Channel] = {}
        self._resume_batches = 0
        self._skipped_head: list[Any] = []
        self.resumption = Resumption(_DispatchSource(self), skip_batches=skip_batches)

    @property
    def num_processes(self) -> int:
        return self.topology.num_processes

    @property
    def process_index(self) -> int:
        return self.topology.process_index

    @property
    def bytes_received(self) -> int:
        """Bytes this process received from process 0 so far (0 on process 0)."""
        return 0 if self._serves else sum(channel.bytes_moved for channel in self._channels.values())

    @property
    def _serves(self) -> bool:
        """Whether this process loads: process 0, or global rank 0 under a mesh that shares indices."""
        if self.topology.rank_indices is None:
            return self.process_index == 0
        return dist.get_rank() == 0

    def _slice_of(self) -> tuple[int, list[tuple[int, int]]]:
        """On the loading process: its own slice's index, and each other rank with its slice's index."""
        indices = self.topology.rank_indices
        if indices is None:
            return 0, [(peer, peer) for peer in range(1, self.num_processes)]
        return indices[0], [(peer, index) for peer, index in enumerate(indices) if peer != 0]

    def _seek(self, position: Position) -> None:
        """Make this iteration start at this process's batch ``position.start`` after ``position.base``."""
        skipped, base = position.start * self.sharding.step_size, position.base
        self._resume_batches = base + skipped
        cursor = self.cursor
        if cursor is not None:
            # NOTE: the steps already taken go in `start`, not `consumed`, so `len()` keeps counting the
            # whole epoch (from `base`), as DataLoaderShard's does; Lightning adds its restored count to it.
            cursor.rewind(skipped, base)

    def fresh_copy(self) -> DataLoaderDispatcher:
        """A loader with every setting of this one and a position of its own (at the epoch's start).

        The dataset is shared; the batch sampler (and its sampler and generator) is copied.
        """
        kwargs = loader_settings(self)
        kwargs.pop("generator", None)
        cursor = self.cursor
        if cursor is None:
            kwargs.update(batch_size=self.batch_size, drop_last=self.drop_last)
        else:
            kwargs["batch_sampler"] = copy.deepcopy(cursor.batch_sampler, {id(self.dataset): self.dataset})
        twin = type(self)(
            self.dataset,
            device=self.device,
            split_batches=self.split_batches,
            use_stateful_dataloader=self.use_stateful_dataloader,
            slice_fn=self.slice_fn,
            non_blocking=self.non_blocking,
            topology=self.topology,
            **kwargs,
        )
        carry_user_attributes(twin, self, getattr(self, "user_attributes", ()))
        twin.set_epoch(self.epoch)
        return twin

    # -- iteration --------------------------------------------------------------------------------
    def _epoch(self, position: Position) -> Generator[tuple[Any, bool], None, None]:
        return self._serve() if self._serves else self._receive()

    def _channel(self, peer: int) -> Channel:
        if peer not in self._channels:
            self._channels[peer] = Channel(peer, communication_device())
        return self._channels[peer]

    def _serve(self) -> Generator[tuple[Any, bool], None, None]:
        """Process 0: build global batches, send each peer its slice, yield our own."""
        last = False
        own, peers = self._slice_of()
        try:
            for batch, last in self._global_slices():
                for peer, index in peers:
                    self._channel(peer).send_batch(batch[index], last)
                yield send_to_device(batch[own], self.device, self.non_blocking), last
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
            for channel in self._channels.values():
                channel.flush()

    def _receive(self) -> Generator[tuple[Any, bool], None, None]:
        """Other processes: receive slices from process 0 until it says the epoch is over."""
        channel = self._channel(0)
        while True:
            status, batch = channel.receive()
            if status is Status.ERROR:
                raise RuntimeError(f"Process 0 failed while loading the batch to dispatch: {batch}")
            if status is Status.STOP:
                return
            yield send_to_device(batch, self.device, self.non_blocking), status is Status.LAST
            if status is Status.LAST:
                return

    def _global_slices(self) -> Iterator[tuple[list[Any], bool]]:
        """Each global batch cut into ``N`` slices, and whether it is the epoch's last."""
        first: list[Any] | None = None
        for current, last in marked_last(self._global_batches()):
            first = first or current
            yield self._cut(current, last, first), last

    def _global_batches(self) -> Iterator[list[Any]]:
        """The batches of the user's loader that form each global batch (``N``, or 1 with ``split_batches``)."""
        source = self._user_batches()
        group = 1 if self.split_batches else self.num_processes
        skip = 0 if self.cursor is not None else self._resume_batches
        skipped = list(itertools.islice(source, skip))
        self._skipped_head = skipped[:group]
        while True:
            batches = list(itertools.islice(source, group))
            if not batches or (len(batches) < group and _user_drop_last(self)):
                return
            yield batches

    def _needs_padding(self, batches: list[Any]) -> bool:
        rows = sum(batch_length(batch) for batch in batches)
        return not _user_drop_last(self) and rows % self.num_processes != 0

    def _head(self, first: list[Any]) -> Any:
        """The first ``N`` rows of the epoch, to complete an incomplete last global batch: read only then,
        from the batches a resumed epoch skipped, then its ``first`` global batch if they have too few."""
        n = self.num_processes
        batches = self._skipped_batches()
        if sum(batch_length(batch) for batch in batches) < n:
            batches = [*batches, *first]
        enough = self.slice_fn is slice_batch and batch_length(batches[0]) >= n
        return self.slice_fn(
            _joined(batches[:1] if enough else batches), slice(0, n), process_index=0, num_processes=n
        )

    def _skipped_batches(self) -> list[Any]:
        """The epoch's skipped batches holding its first ``N`` rows, in order (none in a fresh epoch): kept
        when iterable data skipped them, read by index for map-style data."""
        cursor = self.cursor
        if cursor is None or not self._resume_batches:
            return self._skipped_head
        generator, at_start = self.resumption.source.generator(), self.resumption.position.generator_state
        now = generator.get_state() if generator is not None else None
        if generator is not None and at_start is not None:
            generator.set_state(decode_generator_state(at_start))
        batches, rows = [], 0
        for indices in itertools.islice(cursor.batch_sampler, self._resume_batches):
            batches.append(self._fetch(indices))
            rows += len(indices)
            if rows >= self.num_processes:
                break
        if generator is not None and now is not None:
            generator.set_state(now)
        return batches

    def _fetch(self, indices: list[int]) -> Any:
        """One batch of the user's loader, fetched and collated as its DataLoader would."""
        getitems = getattr(self.dataset, "__getitems__", None)
        samples = getitems(indices) if callable(getitems) else [self.dataset[index] for index in indices]
        return self.collate_fn(samples)

    def _cut(self, batches: list[Any], last: bool, first: list[Any]) -> list[Any]:
        """The ``N`` slices of a global batch: an incomplete last one is completed with the epoch's head; one
        before it whose rows ``N`` does not divide (a bucketing sampler's short batch) is cut into parts
        differing by at most one row, every row once."""
        # NOTE: ``N`` batches of one layout are the slices of their concatenation: no need to join them.
        if self.slice_fn is slice_batch and len(batches) == self.num_processes > 1 and same_layout(batches):
            return batches
        batch = _joined(batches)
        rows, n = batch_length(batch), self.num_processes
        if last and self._needs_padding(batches):
            batch, rows = self._padded(batch, self._head(first)), (rows // n + 1) * n
        elif 0 < rows < n:
            raise ValueError(
                f"`dispatch_batches=True`: a global batch before the epoch's last has {rows} rows, fewer than "
                f"the {n} processes, so some would get none and the step could not be taken together. Have "
                "the batch sampler yield batches of at least as many samples as processes, or use "
                "`dispatch_batches=False`."
            )
        return [
            self.slice_fn(batch, slice(*chunk(rows, n, r)), process_index=r, num_processes=n)
            for r in range(n)
        ]

    def _padded(self, batch: Any, head: Any) -> Any:
        try:
            return concatenate([batch, head])
        except ValueError as error:
            rows = batch_length(batch)
            raise ValueError(
                f"`dispatch_batches=True`: the epoch's last batch has {rows} rows, not a multiple of the "
                f"number of processes ({self.num_processes}), so it is completed with the epoch's first rows, "
                f"but their tensors cannot be concatenated ({error.__cause__ or error}). Set `drop_last=True` "
                "on the DataLoader, or collate every batch to the same trailing shapes."
            ) from error


class StatefulDataLoaderDispatcher(DataLoaderDispatcher, StatefulDataLoader):
    """``DataLoaderDispatcher`` backed by torchdata's ``StatefulDataLoader``; its state is the shard state."""


class _DispatchSource(LoaderSource):
    """Where a ``DataLoaderDispatcher``'s batches come from: the ``IndexSource`` of its ``Resumption``."""

    loader: DataLoaderDispatcher

    def sharding(self) -> ShardingInfo:
        loader, cursor, dataset = self.loader, self.loader.cursor, self.loader.dataset
        return ShardingInfo(
            mode="dispatch",
            num_processes=loader.num_processes,
            split_batches=loader.split_batches,
            even_batches=True,
            drop_last=_user_drop_last(loader),
            batch_size=cursor.batch_size if cursor is not None else loader.batch_size,
            dataset_length=len(dataset) if isinstance(dataset, Sized) else None,
            sampler=sampler_kind(self.sampler(), dataset),
        )

    def generator(self) -> torch.Generator | None:
        """The sampler's generator, or an iterable dataset's (the reference's convention)."""
        cursor = self.loader.cursor
        if cursor is not None:
            return generator_of(getattr(cursor.batch_sampler, "batch_sampler", None))
        generator = getattr(self.loader.dataset, "generator", None)
        return generator if isinstance(generator, torch.Generator) else None

    def sampler(self) -> Any:
        return getattr(self.loader.cursor, "sampler", None)

    def length_after(self, base: int) -> int:
        loader, cursor = self.loader, self.loader.cursor
        whole = cursor.length_after(base) if cursor is not None else max(DataLoader.__len__(loader) - base, 0)
        if loader.split_batches:
            return whole
        return whole // loader.num_processes if _user_drop_last(loader) else -(-whole // loader.num_processes)


def _user_drop_last(loader: DataLoaderDispatcher) -> bool:
    cursor = loader.cursor
    return cursor.drop_last if cursor is not None else bool(loader.drop_last)


def _joined(batches: list[Any]) -> Any:
    return batches[0] if len(batches) == 1 else concatenate(batches)


def _check_group(topology: Topology) -> None:
    if topology.num_processes > 1 and not is_distributed():
        raise ValueError(
            f"`dispatch_batches=True` with `num_processes={topology.num_processes}` needs a running "
            "torch.distributed process group to send batches over. Call `torch.distributed.init_process_group` "
            "first (Lightning's strategy does), or use `dispatch_batches=False`."
        )
