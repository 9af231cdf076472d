"""The loader classes (docs/DESIGN.md, "Real loader subclasses"): the ``StatefulDataLoader`` variants come
from a factory, ``skip_first_batches`` copies share no position with the original, and the index-source
protocol is what makes resumption arithmetic."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_shard import (
    BatchSamplerShard,
    DataLoaderDispatcher,
    DataLoaderShard,
    SeedableRandomSampler,
    SeekableBatchSampler,
    StatefulDataLoaderDispatcher,
    StatefulDataLoaderShard,
    prepare_data_loader,
    skip_first_batches,
)
from lightning_shard.loaders import variants
from lightning_shard.loaders.base import stateful_loader_class
from tests.helpers.datasets import IdMap
from tests.helpers.loader_cases import LoaderCase, indices

DISPATCH = {"dispatch_batches": True, "put_on_device": True}


def _take(loader: Any) -> list[list[int]]:
    return [indices(batch) for batch in loader]


class MyShard(DataLoaderShard):
    """A user's subclass."""


class MyDispatcher(DataLoaderDispatcher):
    """A user's subclass."""


def test_the_stateful_variants_come_from_a_factory() -> None:
    assert stateful_loader_class(DataLoaderShard) is StatefulDataLoaderShard
    assert stateful_loader_class(DataLoaderDispatcher) is StatefulDataLoaderDispatcher
    assert stateful_loader_class(StatefulDataLoaderShard) is StatefulDataLoaderShard
    for base in (MyShard, MyDispatcher):
        variant = stateful_loader_class(base)
        assert issubclass(variant, base) and issubclass(variant, StatefulDataLoader)
        assert stateful_loader_class(base) is variant, "one class per base"
    with pytest.raises(
        TypeError, match=r"`stateful_loader_class` takes `DataLoaderShard`.*got <class 'int'>"
    ):
        stateful_loader_class(int)


def test_a_users_stateful_class_is_the_variant_of_its_base() -> None:
    """A class that is also a ``StatefulDataLoader`` registers as its first base's variant (one mechanism,
    ``ResumableLoader.__init_subclass__``); the 0.2 import path of the factory still works."""

    class Base(DataLoaderShard):
        """A user's subclass."""

    class StatefulBase(Base, StatefulDataLoader):
        """Its stateful variant, written by the user."""

    assert stateful_loader_class(Base) is StatefulBase
    assert type(Base(IdMap(8), batch_size=2, use_stateful_dataloader=True)) is StatefulBase
    assert type(Base(IdMap(8), batch_size=2)) is Base
    assert variants.stateful_loader_class is stateful_loader_class


def test_a_subclass_asked_to_be_stateful_is_stateful() -> None:
    """The seed's contract: the constructor returns the ``StatefulDataLoader`` variant of its class."""
    assert type(MyShard(IdMap(8), batch_size=2, use_stateful_dataloader=True)) is stateful_loader_class(
        MyShard
    )
    assert isinstance(
        DataLoaderDispatcher(IdMap(8), batch_size=2, use_stateful_dataloader=True), StatefulDataLoader
    )
    loader = stateful_loader_class(MyShard)(IdMap(8), batch_size=2, use_stateful_dataloader=True)
    assert isinstance(loader, StatefulDataLoader) and isinstance(loader, MyShard)
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    assert state["format"] == "lightning_shard.loader" and state["steps"] == 1
    fresh = stateful_loader_class(MyShard)(IdMap(8), batch_size=2, use_stateful_dataloader=True)
    fresh.load_state_dict(state)
    assert [batch.tolist() for batch in fresh] == [[2, 3], [4, 5], [6, 7]]
    dispatcher = stateful_loader_class(MyDispatcher)(
        IdMap(8), batch_sampler=BatchSamplerShard(BatchSampler(SequentialSampler(range(8)), 2, False)),
        use_stateful_dataloader=True,
    )  # fmt: skip
    assert isinstance(dispatcher, StatefulDataLoader) and [b.tolist() for b in dispatcher] == [
        [0, 1],
        [2, 3],
        [4, 5],
        [6, 7],
    ]


def test_prepare_picks_the_stateful_class() -> None:
    loader = prepare_data_loader(DataLoader(IdMap(8), batch_size=2), use_stateful_dataloader=True)
    assert type(loader) is StatefulDataLoaderShard
    dispatched = prepare_data_loader(
        DataLoader(IdMap(8), batch_size=2), use_stateful_dataloader=True, **DISPATCH
    )
    assert type(dispatched) is StatefulDataLoaderDispatcher
    assert type(prepare_data_loader(DataLoader(IdMap(8), batch_size=2))) is DataLoaderShard


@pytest.mark.parametrize(
    ("case", "num_processes"),
    [
        (LoaderCase(length=30, batch_size=3, shuffle="generator"), 2),
        (LoaderCase(length=30, batch_size=3, shuffle="global", num_workers=2), 2),
        (LoaderCase(length=30, batch_size=3, shuffle="seedable"), 2),
        (LoaderCase(length=30, batch_size=3, batch_sampler_as_sampler=True), 2),
        (LoaderCase(iterable=True, length=30, batch_size=3, shuffle="stream"), 2),
        (LoaderCase(length=30, batch_size=3, shuffle="generator", options=DISPATCH), 1),
        (LoaderCase(iterable=True, length=30, batch_size=3, options=DISPATCH), 1),
    ],
    ids=str,
)
def test_skip_first_batches_shares_no_position_with_the_original(
    case: LoaderCase, num_processes: int
) -> None:
    def build() -> Any:
        torch.manual_seed(0)  # NOTE: an unseeded sampler draws its seed from the global RNG when prepared.
        return prepare_data_loader(
            case.user_loader(), num_processes=num_processes, process_index=0, **case.prepare_kwargs()
        )

    twin = build()
    expected = [_take(twin), _take(twin)]
    original = build()
    skipped = skip_first_batches(original, 2)
    assert skipped.cursor is None or skipped.cursor is not original.cursor
    assert _take(skipped) == expected[0][2:]
    assert _take(original) == expected[0], "the original starts its own epoch, unmoved by the copy"
    assert _take(original) == expected[1]
    assert _take(skipped) == expected[1]


def test_the_epoch_counter_has_the_references_name_too() -> None:
    loader = prepare_data_loader(DataLoader(IdMap(8), batch_size=2, shuffle=True))
    loader.set_epoch(3)
    assert loader.epoch == loader.iteration == 3


class CountingSeekable:
    """A batch sampler that can start anywhere by arithmetic: the cursor must not walk it."""

    def __init__(self, length: int, batch_size: int) -> None:
        self.batches = [list(range(i, min(i + batch_size, length))) for i in range(0, length, batch_size)]
        self.batch_size, self.walked = batch_size, 0

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batches:
            self.walked += 1
            yield batch

    def __len__(self) -> int:
        return len(self.batches)

    def iter_from(self, start: int, *, consumed: int = 0) -> Iterator[list[int]]:
        return iter(self.batches[consumed + start :])

    def length_after(self, consumed: int) -> int:
        return max(len(self.batches) - consumed, 0)


def test_a_seekable_batch_sampler_is_started_by_arithmetic() -> None:
    seekable = CountingSeekable(20, 4)
    assert isinstance(seekable, SeekableBatchSampler)
    assert not isinstance(BatchSampler(SequentialSampler(range(4)), 2, False), SeekableBatchSampler)
    loader = DataLoaderShard(IdMap(20), batch_sampler=seekable)
    state = {**loader.state_dict(steps=3)}
    resumed = DataLoaderShard(IdMap(20), batch_sampler=seekable)
    resumed.load_state_dict(state)
    assert [batch.tolist() for batch in resumed] == [[12, 13, 14, 15], [16, 17, 18, 19]]
    assert seekable.walked == 0


class NotForwarding:
    """A user's batch sampler whose ``set_epoch`` keeps the epoch to itself."""

    def __init__(self, sampler: Any, batch_size: int = 3) -> None:
        self.sampler, self.batch_size, self.epoch = sampler, batch_size, -1

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        indices = list(self.sampler)
        return iter([indices[i : i + self.batch_size] for i in range(0, len(indices), self.batch_size)])

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.batch_size)


def test_set_epoch_reaches_the_sampler_below_a_batch_sampler_that_does_not_forward_it() -> None:
    def epoch_of(epoch: int, skip: int = 0) -> list[list[int]]:
        batches = NotForwarding(SeedableRandomSampler(range(12), data_seed=1))
        loader = prepare_data_loader(
            DataLoader(IdMap(12), batch_sampler=batches), num_processes=2, process_index=0
        )
        loader.set_epoch(epoch)
        return _take(skip_first_batches(loader, skip) if skip else loader)

    epochs = [epoch_of(epoch) for epoch in range(3)]
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0], "every epoch has an order of its own"
    assert epoch_of(2, skip=1) == epochs[2][1:], "a skip_first_batches copy keeps the sampler's epoch"
