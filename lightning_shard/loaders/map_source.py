"""The source of a map-style ``DataLoaderShard``: batches of indices from its ``EpochCursor``, a resume being
index arithmetic (docs/DESIGN.md, "Global state"); and of one over an iterable dataset it does not shard."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader

from lightning_shard.loaders.cursor import EpochCursor
from lightning_shard.loaders.main_draws import epoch_seed, fetch_seed, fetches_may_draw, isolated_fetches
from lightning_shard.loaders.position import Position, ShardingInfo
from lightning_shard.loaders.source import Batches, ShardSource, marked_last, moving
from lightning_shard.sampling.samplers import forward_epoch, pass_epoch


class MapSource(ShardSource):
    """Map-style data read by index through ``cursor`` (a ``BatchSamplerShard`` inside it), from where a start
    sets it; the main process's fetches draw apart from the model's (``loaders/main_draws.py``)."""

    def __init__(self, loader: Any, cursor: EpochCursor) -> None:
        super().__init__(loader)
        self.cursor = cursor

    def batches(self, start: Position) -> Batches:
        loader = self.loader
        seed, epoch = epoch_seed(start.generator_state, loader.draw_seed), start.epoch or 0
        process = loader.topology.process_index if loader.topology is not None else 0
        loaded = isolated_fetches(
            functools.partial(self._read, start),
            lambda step: fetch_seed(seed, epoch, process, step),
            start.start,
            each_fetch=loader.num_workers == 0 and fetches_may_draw(loader.dataset, loader.collate_fn),
        )
        return marked_last(loaded, moving(loader))

    def _read(self, start: Position) -> Iterator[Any]:
        """The user's batches from ``start``: the cursor is set where the ``DataLoader``'s iterator, created
        right after, takes its indices from."""
        self.cursor.rewind(start.start, start.base)
        return self.loader.user_batches()

    def length_after(self, base: int) -> int:
        return self.cursor.length_after(base)

    def sharding(self) -> ShardingInfo:
        shard, dataset, kind = self.cursor.batch_sampler, self.loader.dataset, self.cursor.kind
        return ShardingInfo(
            mode="shard",
            num_processes=getattr(shard, "num_processes", 1),
            split_batches=bool(getattr(shard, "split_batches", False)),
            even_batches=getattr(shard, "even_batches", True),
            drop_last=kind.drop_last,
            batch_size=kind.batch_size,
            dataset_length=len(dataset) if isinstance(dataset, Sized) else None,
            sampler=kind.name,
        )

    def set_epoch(self, epoch: int) -> None:
        self.cursor.set_epoch(epoch)

    def generator(self) -> torch.Generator | None:
        synchronized = self.loader.synchronized_generator
        return synchronized if synchronized is not None else self.cursor.kind.generator

    def seeded(self) -> Any:
        return self.cursor.kind.seeded


class PlainSource(ShardSource):
    """An iterable dataset the loader does not shard (a ``DataLoaderShard`` built directly over one): read as
    the ``DataLoader`` reads it, without a position to resume."""

    def batches(self, start: Position) -> Batches:
        if start.start or start.base:
            raise ValueError(
                "This loader's dataset is iterable but not an `IterableDatasetShard`, so it cannot skip "
                f"{start.start + start.base} batches. Build the loader with `prepare_data_loader`."
            )
        return marked_last(self.loader.user_batches(), moving(self.loader))

    def length_after(self, base: int) -> int:
        return DataLoader.__len__(self.loader)

    def sharding(self) -> ShardingInfo:
        return ShardingInfo(
            "shard", 1, False, True, bool(self.loader.drop_last), self.loader.batch_size, None, "none"
        )

    def set_epoch(self, epoch: int) -> None:
        if not pass_epoch(self.loader.dataset, epoch):
            forward_epoch(self.loader.batch_sampler, epoch)
