"""The user's own sampler, one process looping over every ``process_index`` (docs/DESIGN.md, "The user's own
sampler"): bucketing batch samplers lose no round, a sampler subclass is kept, samplers drawing from the
global RNG resume exactly, and a loader's main-process draws stay apart from the model's."""

from __future__ import annotations

import io
import random
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, WeightedRandomSampler

from lightning_shard import prepare_data_loader
from lightning_shard.comm.random_states import GATHERED, capture, own_part, own_state, restore
from lightning_shard.loaders.stream_agreement import fetch_seed
from tests.helpers.samplers import Buckets, Evens, GlobalPermutation, MaxTokens


class _Issue(BatchSampler):
    """The issue's reproduction: a short batch mid-epoch."""

    def __init__(self) -> None:
        self.batch_size, self.drop_last = 4, False

    def __iter__(self) -> Any:
        return iter([[0, 1, 2, 3], [4, 5], [6, 7, 8, 9], [10, 11, 12, 13]])

    def __len__(self) -> int:
        return 4


def _shards(make: Any, n: int, **options: Any) -> list[list[list[int]]]:
    """Each process's batches of one epoch, and ``len()`` checked against them."""
    shards = []
    for rank in range(n):
        torch.manual_seed(0)  # NOTE: the processes of a job are seeded alike
        loader = prepare_data_loader(make(), num_processes=n, process_index=rank, **options)
        batches = [torch.as_tensor(batch).tolist() for batch in loader]
        assert len(loader) == len(batches), f"rank {rank}: len {len(loader)}, yielded {len(batches)}"
        shards.append(batches)
    return shards


def test_the_issues_bucketing_sampler_loses_no_round() -> None:
    shards = _shards(lambda: DataLoader(range(14), batch_sampler=_Issue()), 2)
    assert shards == [[[0, 1, 2, 3], [6, 7, 8, 9]], [[4, 5], [10, 11, 12, 13]]]


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("even", [True, False])
@pytest.mark.parametrize("kind", ["buckets", "max_tokens"])
def test_every_batch_of_a_variable_batch_sampler_is_read_once(n: int, even: bool, kind: str) -> None:
    def make() -> DataLoader:
        random.seed(0)
        torch.manual_seed(0)
        sampler = Buckets(50, 4, bucket=10) if kind == "buckets" else MaxTokens(50)
        return DataLoader(range(50), batch_sampler=sampler)

    shards = _shards(make, n, even_batches=even, data_seed=3, use_seedable_sampler=True)
    (alone,) = _shards(make, 1, data_seed=3, use_seedable_sampler=True)
    dealt = [
        batch
        for step in zip(*[s + [None] * (len(alone) - len(s)) for s in shards], strict=False)
        for batch in step
    ]
    dealt = [batch for batch in dealt if batch is not None]
    # NOTE: with `even_batches=True` the epoch's last batch is completed from its start, as the reference does.
    assert dealt[: len(alone) - 1] == alone[:-1]
    assert dealt[len(alone) - 1][: len(alone[-1])] == alone[-1]
    assert len(dealt) - len(alone) < n


@pytest.mark.parametrize("n", [2, 3])
def test_split_batches_splits_a_short_batch_mid_epoch_exactly(n: int) -> None:
    shards = _shards(
        lambda: DataLoader(range(50), batch_sampler=Buckets(50, 6, bucket=10)), n, split_batches=True
    )
    for step in zip(*shards, strict=True):
        merged = [index for part in step for index in part]
        assert len(merged) == len(set(merged))
        assert max(len(part) for part in step) - min(len(part) for part in step) <= 1 or len(merged) == 6
    seen = {index for shard in shards for batch in shard for index in batch}
    assert seen == set(range(50))


def test_split_batches_refuses_a_batch_smaller_than_the_processes_on_every_process() -> None:
    class Tiny(BatchSampler):
        def __init__(self) -> None:
            self.batch_size, self.drop_last = 4, False

        def __iter__(self) -> Any:
            return iter([[0, 1, 2, 3], [4], [5, 6, 7, 8]])

        def __len__(self) -> int:
            return 3

    for rank in range(2):
        loader = prepare_data_loader(
            DataLoader(range(9), batch_sampler=Tiny()),
            num_processes=2,
            process_index=rank,
            split_batches=True,
        )
        with pytest.raises(
            ValueError, match=r"batch 1 of the epoch has 1 samples, fewer than the 2 processes"
        ):
            list(loader)


@pytest.mark.parametrize("seedable", [False, True])
def test_a_sampler_subclass_is_kept_with_its_class_and_filter(seedable: bool) -> None:
    data = list(range(10))
    user = Evens(data)
    user.note = "mine"  # type: ignore[attr-defined]
    shards = []
    for rank in range(2):
        torch.manual_seed(0)
        loader = prepare_data_loader(
            DataLoader(data, sampler=user, batch_size=2),
            num_processes=2,
            process_index=rank,
            use_seedable_sampler=seedable,
            data_seed=1,
        )
        sampler = loader.cursor.batch_sampler.sampler
        assert isinstance(sampler, Evens) and sampler is not user and sampler.note == "mine"
        assert user.generator is None, "the user's sampler is not changed"
        shards.append([batch.tolist() for batch in loader])
    assert {i for shard in shards for batch in shard for i in batch} == {0, 2, 4, 6, 8}


def _resumes_exactly(make: Any, n: int, rank: int, after: int) -> None:
    """A state saved after ``after`` batches of epoch 1, loaded into a fresh loader under another global RNG
    state, yields the rest of the epoch as the uninterrupted loader did."""
    torch.manual_seed(0)
    loader = prepare_data_loader(make(), num_processes=n, process_index=rank)
    list(loader)  # epoch 0
    loader.set_epoch(1)
    iterator = iter(loader)
    for _ in range(after):
        next(iterator)
    state = loader.state_dict()
    rest = [batch.tolist() for batch in iterator]
    torch.manual_seed(123)
    random.seed(123)
    fresh = prepare_data_loader(make(), num_processes=n, process_index=rank)
    fresh.load_state_dict(state)
    assert [batch.tolist() for batch in fresh] == rest


@pytest.mark.parametrize("kind", ["weighted", "global_rng", "buckets"])
def test_a_sampler_drawing_from_the_global_rng_resumes_exactly(kind: str) -> None:
    def make() -> DataLoader:
        if kind == "weighted":
            sampler = WeightedRandomSampler([1.0 + i % 3 for i in range(40)], 40, replacement=True)
            return DataLoader(range(40), sampler=sampler, batch_size=4)
        if kind == "buckets":
            return DataLoader(range(40), batch_sampler=Buckets(40, 4, bucket=10))
        return DataLoader(range(40), sampler=GlobalPermutation(40), batch_size=4)

    for rank in range(2):
        _resumes_exactly(make, 2, rank, after=2)


def test_a_seeded_global_rng_sampler_resumes_onto_another_number_of_processes() -> None:
    def make() -> DataLoader:
        return DataLoader(range(48), sampler=GlobalPermutation(48), batch_size=4)

    options = {"use_seedable_sampler": True, "data_seed": 7}
    two = [prepare_data_loader(make(), num_processes=2, process_index=rank, **options) for rank in range(2)]
    three = [prepare_data_loader(make(), num_processes=3, process_index=rank, **options) for rank in range(3)]
    alone = [
        batch.tolist() for batch in prepare_data_loader(make(), num_processes=1, process_index=0, **options)
    ]
    iterators = [iter(loader) for loader in two]
    consumed = [next(iterator).tolist() for _ in range(2) for iterator in iterators]
    state = two[0].state_dict(steps=2)
    for loader in three:
        loader.load_state_dict(state)
    rest = [list(map(torch.Tensor.tolist, loader)) for loader in three]
    dealt = consumed + [batch for step in zip(*rest, strict=True) for batch in step]
    assert dealt[: len(alone)] == alone
    assert len(dealt) - len(alone) < 3, "only the last round is padded"


def test_iterating_a_loader_leaves_the_models_random_stream_alone() -> None:
    class Noisy(Dataset):
        def __len__(self) -> int:
            return 12

        def __getitem__(self, index: int) -> torch.Tensor:
            return torch.randn(2)

    loader = prepare_data_loader(
        DataLoader(Noisy(), batch_size=3, shuffle=True), num_processes=2, process_index=0
    )
    start = loader.state_dict()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    first = [batch.clone() for batch in loader]
    assert torch.equal(torch.rand(3), expected), "the fetches drew from the global generator"
    torch.manual_seed(99)
    loader.load_state_dict(start)
    again = list(loader)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True)), (
        "a batch's draws depend on where it is"
    )


def test_fetch_seeds_differ_by_epoch_process_and_step() -> None:
    seeds = {fetch_seed(0, e, r, s) for e in range(3) for r in range(3) for s in range(-1, 20)}
    assert len(seeds) == 3 * 3 * 21
    assert all(0 <= seed < 1 << 63 for seed in seeds)


def test_random_states_round_trip_through_a_weights_only_checkpoint() -> None:
    torch.manual_seed(1)
    random.seed(2)
    np.random.seed(3)
    np.random.randn()  # NOTE: a cached Gaussian in NumPy's state
    saved = own_part()
    expected = (torch.rand(3), random.random(), np.random.randn(2))
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    torch.rand(9), random.random(), np.random.rand(3)
    state = own_state(loaded)
    assert state is not None
    restore(state)
    again = (torch.rand(3), random.random(), np.random.randn(2))
    assert torch.equal(again[0], expected[0]) and again[1] == expected[1]
    assert np.array_equal(again[2], expected[2])
    assert own_state({**loaded, "world_size": 2}) is None, "another number of processes starts afresh"
    assert own_state({**loaded, "rank": 1}) is None, "another process's states are not this one's"
    assert set(capture()) >= {"torch", "python", "numpy"}


def test_the_gathered_random_states_of_0_3_0_still_give_this_process_its_own() -> None:
    """0.3.0 saved every process's states in process 0's checkpoint (format 1); Fabric's ``load`` and the
    callback read them with ``own_state`` as before (the ``Trainer``: ``tests/lightning/test_random_states.py``)."""
    torch.manual_seed(5)
    state = capture()
    gathered = {"version": GATHERED, "world_size": 1, "states": [state]}
    assert own_state(gathered) is state
    assert own_state({**gathered, "world_size": 2}) is None


def test_a_seeded_users_sampler_without_data_seed_resumes_from_the_saved_seed() -> None:
    """``use_seedable_sampler=True`` without ``data_seed``: the seed (``torch.initial_seed()``) is saved, so a
    run seeded otherwise continues the saved order (harness defect A)."""

    def make() -> DataLoader:
        return DataLoader(range(40), sampler=GlobalPermutation(40), batch_size=4)

    torch.manual_seed(11)
    loader = prepare_data_loader(make(), num_processes=2, process_index=0, use_seedable_sampler=True)
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    rest = [batch.tolist() for batch in iterator]
    torch.manual_seed(12)
    fresh = prepare_data_loader(make(), num_processes=2, process_index=0, use_seedable_sampler=True)
    fresh.load_state_dict(state)
    assert [batch.tolist() for batch in fresh] == rest


@pytest.mark.parametrize("kind", ["buckets", "global_rng"])
def test_the_order_of_a_users_sampler_does_not_depend_on_the_workers(kind: str) -> None:
    """torch calls ``iter()`` on the index sampler twice with workers and drops the first iterator: it
    must draw nothing (harness defect B)."""

    def epoch(workers: int) -> list[list[int]]:
        sampler = Buckets(40, 4, bucket=10) if kind == "buckets" else None
        loader = (
            DataLoader(range(40), batch_sampler=sampler, num_workers=workers)
            if sampler is not None
            else DataLoader(range(40), sampler=GlobalPermutation(40), batch_size=4, num_workers=workers)
        )
        torch.manual_seed(0)
        return [batch.tolist() for batch in prepare_data_loader(loader, num_processes=2, process_index=1)]

    assert epoch(2) == epoch(0)
