"""``scalable_shuffle`` (docs/DESIGN.md, "Scale"): a keyed permutation that is statistically a shuffle,
evaluated at any position, and the sharded loaders built on it; one process, every ``process_index``.

The statistical bounds are many standard deviations wide (a random permutation of ``n`` has a
position/value correlation of standard deviation ``1 / sqrt(n)``, an ascending-pair fraction of ``1/2``
with standard deviation about ``1 / sqrt(12 n)``, a mean jump of ``n / 3``, Poisson(1) fixed points), so
they fail only for an order that is not a shuffle.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, WeightedRandomSampler

from lightning_shard import prepare_data_loader
from lightning_shard.audit import expected_padding_and_missing
from lightning_shard.sampling import permutation as permutation_module
from lightning_shard.sampling.batch_shard import BatchSamplerShard
from lightning_shard.sampling.permutation import KeyedPermutation
from lightning_shard.sampling.samplers import ScalableRandomSampler
from tests.helpers.datasets import IdMap, IdStream

LENGTHS = [1_000, 65_536, 65_537, 100_003]


def order(length: int, seed: int = 0, epoch: int = 0) -> torch.Tensor:
    return KeyedPermutation(length, seed, epoch).at(torch.arange(length))


# -- a permutation, and a shuffle --------------------------------------------------------------------
@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 1000, 1025, 65_537])
def test_every_epoch_is_a_permutation(length: int) -> None:
    for seed, epoch in [(0, 0), (0, 1), (7, 3), (-5, 2), (2**70, 1)]:
        assert torch.equal(order(length, seed, epoch).sort().values, torch.arange(length))


@pytest.mark.parametrize("length", LENGTHS)
def test_the_order_is_statistically_a_shuffle(length: int) -> None:
    positions = torch.arange(length, dtype=torch.float64)
    for seed, epoch in [(0, 0), (1234, 0), (1234, 1)]:
        values = order(length, seed, epoch).double()
        correlation = torch.corrcoef(torch.stack([positions, values]))[0, 1].item()
        assert abs(correlation) < 8 / math.sqrt(length), correlation
        ascending = (values[1:] > values[:-1]).double().mean().item()
        assert abs(ascending - 0.5) < 8 / math.sqrt(12 * length), ascending
        jump = (values[1:] - values[:-1]).abs().mean().item() / length
        assert abs(jump - 1 / 3) < 0.01, jump
        assert int((values == positions).sum()) <= 12, "fixed points of a shuffle: about 1"


def test_a_new_order_each_epoch_and_each_seed_and_the_same_for_the_same_key() -> None:
    length = 10_007
    base = order(length, 3, 0)
    assert torch.equal(base, order(length, 3, 0)), "deterministic per (data_seed, epoch)"
    for other in (order(length, 3, 1), order(length, 3, 2), order(length, 4, 0), order(length, 2, 1)):
        agree = (other == base).double().mean().item()
        assert agree < 0.01, "a new order: two shuffles agree at about 1 / n of the positions"
        values = torch.stack([base.double(), other.double()])
        assert abs(torch.corrcoef(values)[0, 1].item()) < 8 / math.sqrt(length)


def test_small_datasets_get_every_order_about_equally_often() -> None:
    """Over 2,400 keys each of the 120 orders of 5 samples appears (about 20 times each)."""
    orders = Counter(tuple(order(5, seed, epoch).tolist()) for seed in range(240) for epoch in range(10))
    assert len(orders) == math.factorial(5)
    assert max(orders.values()) < 50 and min(orders.values()) > 3, orders.most_common(3)


def test_a_position_takes_any_value_about_equally_often_on_the_keyed_path() -> None:
    """Beyond ``_SMALL`` samples (the Feistel network): the value at a position over 1,000 keys."""
    length = permutation_module._SMALL + 1
    for position in (0, length // 2, length - 1):
        values = torch.cat(
            [KeyedPermutation(length, seed, 0).at(torch.tensor([position])) for seed in range(1_000)]
        )
        deciles = torch.bincount(values * 10 // length, minlength=10)
        assert int(deciles.min()) > 50 and int(deciles.max()) < 150, deciles.tolist()


def test_any_positions_give_the_values_of_the_whole_order() -> None:
    permutation = KeyedPermutation(100_003, 11, 4)
    whole = permutation.at(torch.arange(100_003))
    positions = torch.randint(0, 100_003, (7, 13))
    assert torch.equal(permutation.at(positions), whole[positions])
    sampler = ScalableRandomSampler(range(100_003), data_seed=11)
    sampler.set_epoch(4)
    assert list(sampler) == whole.tolist(), "iterating the sampler yields the same order"


# -- sharded: one process plays every process_index --------------------------------------------------
def _shards(
    length: int, batch_size: int, num_processes: int, drop: bool = False, **options: Any
) -> list[list[list[int]]]:
    shards = []
    for rank in range(num_processes):
        user = DataLoader(IdMap(length), batch_size=batch_size, shuffle=True, drop_last=drop)
        loader = prepare_data_loader(
            user,
            num_processes=num_processes,
            process_index=rank,
            scalable_shuffle=True,
            data_seed=21,
            **options,
        )
        shards.append([batch.tolist() for batch in loader])
    return shards


@pytest.mark.parametrize("num_processes", [1, 2, 3, 4])
@pytest.mark.parametrize("split_batches", [False, True])
@pytest.mark.parametrize("even_batches", [True, False, "balanced"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_processes_share_one_order_exactly_once_plus_the_padding(
    num_processes: int, split_batches: bool, even_batches: Any, drop_last: bool
) -> None:
    length, batch_size = 47, 4 if split_batches else 3
    if split_batches and batch_size % num_processes:
        pytest.skip("split_batches needs a batch size divisible by the number of processes")
    shards = _shards(
        length,
        batch_size,
        num_processes,
        split_batches=split_batches,
        even_batches=even_batches,
        drop=drop_last,
    )
    counts = Counter(index for shard in shards for batch in shard for index in batch)
    padding, missing = expected_padding_and_missing(
        length,
        batch_size,
        num_processes,
        split_batches=split_batches,
        even_batches=even_batches if num_processes > 1 else False,
        drop_last=drop_last,
    )
    assert sum(counts.values()) - len(counts) == padding and length - len(counts) == missing
    # The same global order whatever the number of processes: the whole epoch's order, cut in batches.
    whole = order(length, 21, 0).tolist()
    first_batches = [index for shard in shards for index in shard[0]]
    if split_batches:
        assert first_batches == whole[:batch_size]
    else:
        assert first_batches == whole[: batch_size * num_processes]


@pytest.mark.parametrize("even_batches", [True, False, "balanced"])
@pytest.mark.parametrize("split_batches", [False, True])
def test_the_keyed_path_equals_the_generic_path_also_after_an_elastic_skip(
    even_batches: Any, split_batches: bool
) -> None:
    sampler = ScalableRandomSampler(range(50), data_seed=5)
    sampler.set_epoch(2)
    for num_processes in (1, 2, 4):
        for rank in range(num_processes):
            shard = BatchSamplerShard(
                BatchSampler(sampler, 4, False), num_processes, rank, split_batches, even_batches
            )
            for consumed in (0, 3, 11):
                fast = list(shard.iter_from(0, consumed=consumed))
                generic = list(
                    shard._iter_generic(list(BatchSampler(sampler, 4, False))[consumed:], consumed)
                )
                assert fast == generic, (num_processes, rank, consumed)
                assert list(shard.iter_from(1, consumed=consumed)) == fast[1:]


def test_the_epoch_and_the_seed_choose_the_order() -> None:
    loader = prepare_data_loader(
        DataLoader(IdMap(30), batch_size=5, shuffle=True),
        num_processes=1,
        process_index=0,
        scalable_shuffle=True,
        data_seed=3,
    )
    epochs = [[index for batch in loader for index in batch.tolist()] for _ in range(3)]
    assert epochs == [order(30, 3, epoch).tolist() for epoch in range(3)]
    torch.manual_seed(99)  # the global generator plays no part
    again = prepare_data_loader(
        DataLoader(IdMap(30), batch_size=5, shuffle=True),
        num_processes=1,
        process_index=0,
        scalable_shuffle=True,
        data_seed=3,
    )
    assert [index for batch in again for index in batch.tolist()] == epochs[0]


# -- what it serves, and what it refuses -------------------------------------------------------------
def _prepared(loader: DataLoader) -> Any:
    return prepare_data_loader(
        loader, num_processes=2, process_index=0, scalable_shuffle=True, iterable_sharding="stride"
    )


@pytest.mark.parametrize(
    ("loader", "pattern"),
    [
        (
            lambda: DataLoader(IdMap(8), batch_size=2, sampler=WeightedRandomSampler([1.0] * 8, 8)),
            r"comes from a `WeightedRandomSampler`.*`shuffle=True`.*`scalable_shuffle=False`",
        ),
        (
            lambda: DataLoader(IdMap(8), batch_size=2, shuffle=True, generator=torch.Generator()),
            r"has a `generator` of its own.*Drop the `generator`.*`scalable_shuffle=False`",
        ),
        (
            lambda: DataLoader(IdMap(8), batch_size=2, sampler=RandomSampler(range(8), replacement=True)),
            r"`replacement=True` and `num_samples=None`",
        ),
        (
            lambda: DataLoader(IdMap(8), batch_sampler=[[0, 1], [2, 3]]),
            r"comes from a `list`",
        ),
    ],
    ids=["weighted", "generator", "replacement", "custom-batch-sampler"],
)
def test_what_it_cannot_serve_is_refused(loader: Any, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        _prepared(loader())


def test_sequential_and_streamed_loaders_are_left_as_they_are() -> None:
    sequential = _prepared(DataLoader(IdMap(8), batch_size=2))
    assert [batch.tolist() for batch in sequential] == [[0, 1], [4, 5]]
    assert type(sequential.batch_sampler.batch_sampler.sampler) is SequentialSampler
    streamed = _prepared(DataLoader(IdStream(list(range(8))), batch_size=2, num_workers=0))
    assert [batch.tolist() for batch in streamed] == [[0, 1], [4, 5]]


def test_the_users_sampler_is_not_changed() -> None:
    user = DataLoader(IdMap(8), batch_size=2, shuffle=True)
    sampler = user.sampler
    _prepared(user)
    assert type(user.sampler) is RandomSampler and user.sampler is sampler
