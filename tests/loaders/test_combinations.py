"""One process, every process index in turn: the loader side of feature pairs that lost or repeated data
together (docs/DESIGN.md, "Combination harness"). The real multi-process fits are
``tests/lightning/test_combinations.py``."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_shard import (
    DataLoaderDispatcher,
    DataLoaderShard,
    ShardDataModule,
    StatefulDataLoaderDispatcher,
    StatefulDataLoaderShard,
    prepare_data_loader,
    skip_first_batches,
)
from tests.helpers.datasets import WorkerSplitIdStream


def _ids(loader: Any) -> list[list[int]]:
    return [torch.as_tensor(batch).reshape(-1).tolist() for batch in loader]


# -- the seed's constructor contract ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cls", "variant"),
    [(DataLoaderShard, StatefulDataLoaderShard), (DataLoaderDispatcher, StatefulDataLoaderDispatcher)],
)
def test_the_constructor_takes_use_stateful_dataloader_as_the_seed_documents(
    cls: type, variant: type
) -> None:
    loader = cls(list(range(10)), batch_size=4, use_stateful_dataloader=True)
    assert type(loader) is variant and isinstance(loader, StatefulDataLoader)
    assert _ids(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert type(cls(list(range(10)), batch_size=4)) is cls, "without it, the class itself"
    assert type(pickle.loads(pickle.dumps(cls(list(range(4)), batch_size=2)))) is cls


def test_the_stateful_flag_counts_by_position_and_for_subclasses() -> None:
    positional = DataLoaderShard(list(range(6)), None, None, None, 0, True, batch_size=3)
    assert isinstance(positional, StatefulDataLoaderShard)

    class Mine(DataLoaderShard):
        pass

    mine = Mine(list(range(6)), batch_size=3, use_stateful_dataloader=True)
    assert isinstance(mine, Mine) and isinstance(mine, StatefulDataLoader)
    assert _ids(mine) == [[0, 1, 2], [3, 4, 5]]


# -- a user's DataLoader subclass --------------------------------------------------------------------------
class Reversing(DataLoader):
    """A user's subclass: its ``__iter__`` reverses each batch; it takes an extra argument."""

    def __init__(self, *args: Any, marker: str = "default", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marker = marker

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            yield batch.flip(0)


@pytest.mark.parametrize("stateful", [False, True])
def test_a_dataloader_subclass_stays_itself_on_every_process(stateful: bool) -> None:
    for rank in (0, 1):
        plain = prepare_data_loader(
            DataLoader(list(range(10)), batch_size=2), num_processes=2, process_index=rank
        )
        mine = prepare_data_loader(
            Reversing(list(range(10)), batch_size=2, marker="kept"),
            num_processes=2,
            process_index=rank,
            use_stateful_dataloader=stateful,
        )
        assert isinstance(mine, Reversing) and isinstance(mine, DataLoaderShard)
        assert isinstance(mine, StatefulDataLoader) is stateful
        assert mine.marker == "kept"
        assert _ids(mine) == [ids[::-1] for ids in _ids(plain)]
        copy = skip_first_batches(mine, 1)
        assert isinstance(copy, Reversing) and copy.marker == "kept"
        assert _ids(copy) == [ids[::-1] for ids in _ids(plain)][1:]


def test_a_dispatched_subclass_runs_its_iter_on_the_loading_process() -> None:
    mine = prepare_data_loader(
        Reversing(list(range(6)), batch_size=3, marker="kept"),
        num_processes=1,
        process_index=0,
        dispatch_batches=True,
        put_on_device=True,
    )
    assert isinstance(mine, Reversing) and isinstance(mine, DataLoaderDispatcher) and mine.marker == "kept"
    assert _ids(mine) == [[2, 1, 0], [5, 4, 3]]


# -- an epoch left early ------------------------------------------------------------------------------------
def test_an_epoch_left_early_is_followed_by_the_next_one() -> None:
    """As a ``DataLoader`` draws a new order at each ``iter()``, a loop that breaks out (Fabric training K
    steps an epoch) reads the next epoch next; its state says so."""

    def build() -> Any:
        data = DataLoader(list(range(20)), batch_size=2, shuffle=True)
        return prepare_data_loader(
            data, num_processes=2, process_index=0, use_seedable_sampler=True, data_seed=7
        )

    whole = build()
    epochs = [_ids(whole) for _ in range(3)]
    left = build()
    starts = []
    for _ in range(3):
        batches = iter(left)
        starts.append([next(batches).tolist(), next(batches).tolist()])
    assert starts == [epoch[:2] for epoch in epochs]
    assert len({json.dumps(start) for start in starts}) == 3
    state = left.state_dict()
    assert state["epoch"] == 2 and state["steps"] == 2
    left.set_epoch(5)
    assert left.state_dict()["epoch"] == 5 and left.state_dict()["steps"] == 0, "an explicit epoch wins"


def test_a_pending_restore_keeps_its_seed_even_when_it_is_zero() -> None:
    """``state_dict()`` before the restored epoch begins reports the saved sampler seed, 0 included."""

    def build(seed: int) -> Any:
        data = DataLoader(list(range(20)), batch_size=2, shuffle=True)
        return prepare_data_loader(
            data, num_processes=2, process_index=0, use_seedable_sampler=True, data_seed=seed
        )

    saving = build(0)
    batches = iter(saving)
    next(batches)
    restored = build(5)
    restored.load_state_dict(saving.state_dict())
    assert restored.state_dict()["sampler_seed"] == 0


class _Reporting:
    """A loop that reports what it consumed (``ResumeHook``), as Lightning's does: its loader keeps the epoch
    when iterated again within it."""

    def consumed(self) -> None:
        return None

    def resharded(self) -> None:
        return None


@pytest.mark.parametrize("workers", [0, 2])
def test_an_epoch_iterated_again_before_any_batch_keeps_its_order(workers: int) -> None:
    """Lightning iterates a reloaded loader twice at the epoch's start; workers prefetch (so draw the order)
    in the first: the epoch's order must not depend on that (harness defect 13)."""

    def build(num_workers: int) -> Any:
        data = DataLoader(
            list(range(24)),
            batch_size=2,
            shuffle=True,
            generator=torch.Generator().manual_seed(3),
            num_workers=num_workers,
            multiprocessing_context="fork" if num_workers else None,
        )
        loader = prepare_data_loader(data, num_processes=2, process_index=0)
        loader.resume_hook = _Reporting()
        return loader

    once = [batch.tolist() for batch in build(0)]
    twice = build(workers)
    iter(twice)
    assert [batch.tolist() for batch in twice] == once


# -- a stream its workers split, moved to another number of processes -------------------------------------
def _worker_split(num_processes: int, rank: int) -> Any:
    data = DataLoader(WorkerSplitIdStream(31), batch_size=2, num_workers=2, multiprocessing_context="fork")
    return prepare_data_loader(data, num_processes=num_processes, process_index=rank)


def _global_order(per_rank: list[list[list[int]]]) -> list[int]:
    return [i for step in zip(*per_rank, strict=True) for batch in step for i in batch]


@pytest.mark.parametrize(("saved", "resumed"), [(2, 3), (3, 2), (2, 1)])
def test_a_stream_its_workers_split_continues_on_another_number_of_processes(
    saved: int, resumed: int
) -> None:
    whole = _global_order([_ids(_worker_split(saved, rank)) for rank in range(saved)])
    stop = 3
    first = _worker_split(saved, 0)
    batches = iter(first)
    for _ in range(stop):
        next(batches)
    state = json.loads(json.dumps(first.state_dict()))
    rest = []
    for rank in range(resumed):
        again = _worker_split(resumed, rank)
        again.load_state_dict(state)
        rest.append(_ids(again))
    consumed = stop * 2 * saved
    # NOTE: each worker pads its own last group from its first, so padding stands inside `whole` too; the
    # rest of the epoch is its real samples, in the order they come.
    remaining = list(dict.fromkeys(i for i in whole[consumed:] if i not in whole[:consumed]))
    continued = _global_order(rest)
    assert continued[: len(remaining)] == remaining, "the rest of the epoch, in its order"
    counts = Counter(whole[:consumed] + continued)
    assert sorted(counts) == list(range(31))
    padding = 0 if resumed == 1 else -len(remaining) % (2 * resumed)  # NOTE: one process never pads
    assert sum(counts.values()) - 31 == padding, "only the new count's end-of-epoch padding repeats"


def test_a_second_move_within_the_epoch_is_refused_with_the_reason() -> None:
    first = _worker_split(2, 0)
    batches = iter(first)
    for _ in range(2):
        next(batches)
    moved = _worker_split(3, 0)
    moved.load_state_dict(first.state_dict())
    batches = iter(moved)
    next(batches)
    again = _worker_split(2, 0)
    with pytest.raises(ValueError, match="moves once per epoch. Resume on 3 processes"):
        again.load_state_dict(moved.state_dict())


# -- misspelled per-stage options ---------------------------------------------------------------------------
def test_a_misspelled_stage_key_is_refused_with_the_keys() -> None:
    class Data(ShardDataModule):
        shard_stage_options = {"val": {"even_batches": True}}

    with pytest.raises(ValueError, match=r"key 'val', which is not a stage.*did you mean 'validate'"):
        Data().shard_options("train")


def test_a_misspelled_option_of_a_stage_is_refused_with_the_closest() -> None:
    class Data(ShardDataModule):
        shard_stage_options = {"train": {"split_batch": True}}

    with pytest.raises(TypeError, match="Did you mean `split_batches`"):
        Data().shard_options("train")


# -- a seedable sampler without a seed, on processes seeded differently -------------------------------------
def _unseeded(rank: int, world_size: int) -> dict[str, list[int]]:
    torch.manual_seed(1000 + rank)  # NOTE: processes not seeded alike: their default seeds differ
    read = {}
    for option in ("use_seedable_sampler", "scalable_shuffle"):
        data = DataLoader(list(range(40)), batch_size=4, shuffle=True)
        loader = prepare_data_loader(data, **{option: True})
        read[option] = [i for batch in loader for i in batch.tolist()]
    return read


@pytest.mark.dist
def test_a_seeded_order_without_a_seed_is_the_same_on_every_process() -> None:
    from tests.helpers.dist import run_distributed

    first, second = run_distributed(_unseeded, 2, timeout=60)
    for option in ("use_seedable_sampler", "scalable_shuffle"):
        ids = sorted(first[option] + second[option])
        assert ids == list(range(40)), f"{option}: every sample once, the processes agreed on the order"
