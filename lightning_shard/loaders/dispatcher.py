"""``DataLoaderDispatcher``: process 0 loads, every other process receives only its slice (docs/DESIGN.md,
"Scatter dispatch")."""

from __future__ import annotations

import copy
from typing import Any, cast

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_shard._checks import check_non_negative
from lightning_shard.comm.collectives import is_distributed
from lightning_shard.comm.topology import Topology, resolve_topology
from lightning_shard.comm.tree import slice_batch
from lightning_shard.loaders.base import ResumableLoader
from lightning_shard.loaders.cursor import EpochCursor
from lightning_shard.loaders.data_kind import DataKind
from lightning_shard.loaders.dispatch_source import DispatchSource
from lightning_shard.loaders.kinds import classify
from lightning_shard.loaders.resumable import Resumption
from lightning_shard.loaders.user_class import carry_user_attributes, init_data_loader, loader_settings


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
        skip_batches = check_non_negative("skip_batches", skip_batches)
        topology = topology if topology is not None else resolve_topology(num_processes, process_index)
        if topology.num_processes > 1 and not is_distributed():
            raise ValueError(
                f"`dispatch_batches=True` with `num_processes={topology.num_processes}` needs a running "
                "torch.distributed process group to send batches over. Call `torch.distributed.init_process_group` "
                "first (Lightning's strategy does), or use `dispatch_batches=False`."
            )
        self.kind = kind if kind is not None else classify(dataset, dispatch=True, built=kwargs)
        if self.kind.indexed:
            self._cursor = kwargs["batch_sampler"] = EpochCursor(kwargs["batch_sampler"])
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

    def fresh_copy(self) -> DataLoaderDispatcher:
        """A loader with every setting and the epoch of this one and a position of its own (at the epoch's
        start): the dataset is shared, the batch sampler (and its sampler and generator) copied."""
        kwargs = loader_settings(self)
        kwargs.pop("generator", None)
        if self.kind.indexed:
            index = cast(EpochCursor, self.cursor).batch_sampler
            kwargs["batch_sampler"] = copy.deepcopy(index, {id(self.dataset): self.dataset})
        else:
            kwargs.update(batch_size=self.batch_size, drop_last=self.drop_last)
        twin = type(self)(
            self.dataset,
            device=self.device,
            split_batches=self.split_batches,
            use_stateful_dataloader=self.use_stateful_dataloader,
            slice_fn=self.slice_fn,
            non_blocking=self.non_blocking,
            topology=self.topology,
            kind=self.kind,
            even_batches=self.even_batches,
            **kwargs,
        )
        carry_user_attributes(twin, self, getattr(self, "user_attributes", ()))
        twin.set_epoch(self.epoch)
        return twin


class StatefulDataLoaderDispatcher(DataLoaderDispatcher, StatefulDataLoader):
    """``DataLoaderDispatcher`` backed by torchdata's ``StatefulDataLoader``; its state is the shard state."""
