"""Property tests of the core samplers' invariants, across all processes of one configuration.

Each example builds the shards of every ``process_index`` of one configuration and checks them
together: coverage, exactly-once where promised, padding only from the start of the epoch, equal
batch counts and sizes under ``even_batches``, ``drop_last`` semantics, ``SkipBatchSampler``, epoch
propagation and the random number generators a shard consumes.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import data_loader as ref
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from lightning_shard import BatchSamplerShard, SeedableRandomSampler, SkipBatchSampler
from lightning_shard.sampling.fast_index import fast_epoch_order

SEQUENTIAL, SEEDABLE, RANDOM_GENERATOR, SUBCLASS = "sequential", "seedable", "random_generator", "subclass"
KINDS = [SEQUENTIAL, SEEDABLE, RANDOM_GENERATOR, SUBCLASS]
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True)


class SubclassBatchSampler(BatchSampler):
    """A ``BatchSampler`` subclass: same batches, but only the generic path applies."""


@dataclass(frozen=True)
class Setup:
    """One configuration: a sampler kind, sizes and flags; builds fresh, identical batch samplers."""

    kind: str
    length: int
    batch_size: int
    num_processes: int
    split_batches: bool
    even_batches: bool | str
    drop_last: bool
    seed: int

    def batch_sampler(self) -> BatchSampler:
        data = range(self.length)
        sampler: Any
        if self.kind == SEQUENTIAL:
            sampler = SequentialSampler(data)
        elif self.kind == SEEDABLE:
            sampler = SeedableRandomSampler(data, data_seed=self.seed)
        else:
            sampler = RandomSampler(data, generator=torch.Generator().manual_seed(self.seed))
        cls = SubclassBatchSampler if self.kind == SUBCLASS else BatchSampler
        return cls(sampler, batch_size=self.batch_size, drop_last=self.drop_last)

    def shard(self, rank: int) -> BatchSamplerShard:
        return BatchSamplerShard(
            self.batch_sampler(),
            num_processes=self.num_processes,
            process_index=rank,
            split_batches=self.split_batches,
            even_batches=self.even_batches,
        )

    def order(self) -> list[int]:
        """The epoch's order of indices, as the unsharded batch sampler yields it."""
        return list(self.batch_sampler().sampler)

    @property
    def global_batch_size(self) -> int:
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    @property
    def balanced(self) -> bool:
        """Whether the epoch ends in a balanced tail (else it pads or stays uneven)."""
        return self.even_batches == "balanced" and not self.drop_last and self.length >= self.num_processes

    @property
    def process_batch_size(self) -> int:
        return self.batch_size // self.num_processes if self.split_batches else self.batch_size


@st.composite
def setups(draw: st.DrawFn, kinds: list[str] = KINDS, max_length: int = 200) -> Setup:
    num_processes = draw(st.integers(1, 8))
    split = draw(st.booleans())
    if split:
        batch_size = num_processes * draw(st.integers(1, max(1, 17 // num_processes)))
    else:
        batch_size = draw(st.integers(1, 17))
    kind = draw(st.sampled_from(kinds))
    length = draw(st.integers(0 if kind == SEQUENTIAL else 1, max_length))
    even = draw(st.sampled_from([True, False, "balanced"]))
    drop_last = draw(st.booleans())
    return Setup(
        kind, length, batch_size, num_processes, split, even, drop_last, seed=draw(st.integers(0, 2**31 - 1))
    )


def all_ranks(setup: Setup) -> list[list[list[int]]]:
    return [list(setup.shard(rank)) for rank in range(setup.num_processes)]


def global_sequence(setup: Setup, per_rank: list[list[list[int]]]) -> list[int]:
    """The indices of all processes in global order: step by step, rank by rank."""
    sequence: list[int] = []
    for step in range(max((len(batches) for batches in per_rank), default=0)):
        for batches in per_rank:
            if step < len(batches):
                sequence += batches[step]
    return sequence


@SETTINGS
@given(setups())
def test_every_sample_appears_and_padding_is_a_prefix_cycle(setup: Setup) -> None:
    per_rank = all_ranks(setup)
    sequence, order = global_sequence(setup, per_rank), setup.order()
    if setup.drop_last:
        complete = len(order) // setup.global_batch_size * setup.global_batch_size
        assert sequence == order[:complete]
        return
    assert set(sequence) == set(range(setup.length))
    if not setup.even_batches or setup.balanced:
        assert sequence == order  # exactly once, in the epoch's order
        return
    padding = sequence[len(order) :]
    assert sequence[: len(order)] == order
    assert padding == list(itertools.islice(itertools.cycle(order), len(padding)))
    assert len(padding) < setup.global_batch_size
    assert len(sequence) % setup.global_batch_size == 0


@SETTINGS
@given(setups())
def test_even_batches_gives_equal_counts_and_sizes(setup: Setup) -> None:
    per_rank = all_ranks(setup)
    counts = {len(batches) for batches in per_rank}
    sizes = {len(batch) for batches in per_rank for batch in batches}
    if setup.balanced:
        assert len(counts) == 1
        last = [batches[-1] for batches in per_rank if batches]
        assert all(len(batch) == setup.process_batch_size for batches in per_rank for batch in batches[:-1])
        assert max(map(len, last), default=0) - min(map(len, last), default=0) <= 1
        assert all(0 < len(batch) <= setup.process_batch_size + 1 for batch in last)
    elif setup.even_batches or setup.drop_last:
        assert len(counts) == 1
        assert sizes <= {setup.process_batch_size}
    else:
        assert max(counts) - min(counts) <= 1


@SETTINGS
@given(setups())
def test_len_equals_what_iteration_yields(setup: Setup) -> None:
    for rank in range(setup.num_processes):
        shard = setup.shard(rank)
        assert len(shard) == len(list(shard)) == len(list(setup.shard(rank)._iter_generic()))


@SETTINGS
@given(setups(kinds=[RANDOM_GENERATOR]))
def test_the_generic_path_balances_like_the_fast_path(setup: Setup) -> None:
    generic = dataclasses.replace(setup, kind=SUBCLASS)
    assert all_ranks(generic) == all_ranks(setup)
    for rank in range(setup.num_processes):
        assert len(generic.shard(rank)) == len(setup.shard(rank))


@SETTINGS
@given(setups(kinds=[SEQUENTIAL]))
def test_empty_dataset_yields_nothing_everywhere(setup: Setup) -> None:
    empty = dataclasses.replace(setup, length=0)
    for rank in range(empty.num_processes):
        shard = empty.shard(rank)
        assert list(shard) == [] and list(shard._iter_generic()) == [] and len(shard) == 0


@SETTINGS
@given(setups(), st.integers(0, 30))
def test_skip_batch_sampler_skips_exactly(setup: Setup, skip: int) -> None:
    for rank in range(setup.num_processes):
        full = list(setup.shard(rank))
        expected_len = max(len(full) - skip, 0)
        skipping = SkipBatchSampler(setup.shard(rank), skip)
        assert list(skipping) == full[skip:]
        assert len(skipping) == expected_len
        generic = list(itertools.islice(setup.shard(rank)._iter_generic(), skip, None))
        assert generic == full[skip:]
        theirs = ref.SkipBatchSampler(setup.shard(rank), skip)
        assert list(iter(theirs)) == full[skip:]  # NOTE: its len() goes negative past the end
    plain = setup.batch_sampler()
    assert list(SkipBatchSampler(plain, skip)) == list(setup.batch_sampler())[skip:]
    assert len(SkipBatchSampler(plain, skip)) == max(len(plain) - skip, 0)


Stack = tuple[SeedableRandomSampler, BatchSamplerShard, SkipBatchSampler]


def _seedable_stack(length: int, seed: int) -> Stack:
    sampler = SeedableRandomSampler(range(length), data_seed=seed)
    shard = BatchSamplerShard(BatchSampler(sampler, 4, False), num_processes=2, process_index=1)
    return sampler, shard, SkipBatchSampler(shard, 1)


@SETTINGS
@given(st.integers(1, 300), st.integers(0, 2**31 - 1), st.integers(0, 1000))
def test_set_epoch_reaches_the_sampler_through_every_wrapper(length: int, seed: int, epoch: int) -> None:
    sampler, shard, skipping = _seedable_stack(length, seed)
    shard.set_epoch(epoch)
    assert (sampler.epoch, shard.epoch) == (epoch, epoch)
    skipping.set_epoch(epoch + 1)
    assert (sampler.epoch, shard.epoch) == (epoch + 1, epoch + 1)
    fresh_sampler, fresh_shard, _ = _seedable_stack(length, seed)
    fresh_sampler.set_epoch(epoch + 1)
    assert list(skipping) == list(fresh_shard)[1:]


@SETTINGS
@given(st.integers(1, 300), st.integers(0, 2**31 - 1), st.integers(0, 1000))
def test_seedable_order_is_a_pure_function_of_seed_and_epoch(length: int, seed: int, epoch: int) -> None:
    first, second = (SeedableRandomSampler(range(length), data_seed=seed) for _ in range(2))
    second.set_epoch(epoch)
    order = list(second)
    assert list(second) == order  # iterating does not advance the epoch
    assert second.epoch == epoch
    first.set_epoch(epoch + 5)
    list(first)
    first.set_epoch(epoch)
    assert list(first) == order  # nothing but (data_seed, epoch) matters
    theirs = ref.SeedableRandomSampler(range(length), data_seed=seed)
    theirs.set_epoch(epoch)
    assert list(theirs) == order
    assert sorted(order) == list(range(length))
    if length >= 20:
        first.set_epoch(epoch + 1)
        assert list(first) != order


def _drain(batches: Iterator[list[int]]) -> list[int]:
    return [index for batch in batches for index in batch]


@settings(SETTINGS, max_examples=100)
@given(setups(kinds=[RANDOM_GENERATOR]), st.integers(0, 2**31 - 1))
def test_random_fast_path_consumes_the_global_rng_like_torch(setup: Setup, seed: int) -> None:
    for rank in range(setup.num_processes):
        shard = BatchSamplerShard(
            BatchSampler(RandomSampler(range(setup.length)), setup.batch_size, setup.drop_last),
            num_processes=setup.num_processes,
            process_index=rank,
            split_batches=setup.split_batches,
            even_batches=setup.even_batches,
        )
        assert fast_epoch_order(shard.kind) is not None
        torch.manual_seed(seed)
        ours = _drain(iter(shard))
        after_ours = torch.get_rng_state()
        torch.manual_seed(seed)
        list(RandomSampler(range(setup.length)))
        assert torch.equal(after_ours, torch.get_rng_state())
        torch.manual_seed(seed)
        assert ours == _drain(shard._iter_generic())


@SETTINGS
@given(setups(kinds=[RANDOM_GENERATOR]))
def test_random_fast_path_leaves_a_user_generator_like_torch(setup: Setup) -> None:
    for rank in range(setup.num_processes):
        shard = setup.shard(rank)
        assert fast_epoch_order(shard.kind) is not None
        for _ in range(2):  # the second epoch starts from the state the first one left
            list(shard)
        generator = torch.Generator().manual_seed(setup.seed)
        torch_sampler = RandomSampler(range(setup.length), generator=generator)
        for _ in range(2):
            list(torch_sampler)
        assert torch.equal(shard.sampler.generator.get_state(), torch_sampler.generator.get_state())


@SETTINGS
@given(st.integers(1, 300), st.integers(0, 2**31 - 1), st.integers(0, 100))
def test_seedable_with_user_generator_ends_like_the_reference(length: int, seed: int, epoch: int) -> None:
    ours_gen, their_gen = torch.Generator(), torch.Generator()
    ours = SeedableRandomSampler(range(length), generator=ours_gen, data_seed=seed)
    theirs = ref.SeedableRandomSampler(range(length), generator=their_gen, data_seed=seed)
    ours.set_epoch(epoch)
    theirs.set_epoch(epoch)
    shard = BatchSamplerShard(BatchSampler(ours, 3, False), num_processes=2, process_index=0)
    assert fast_epoch_order(shard.kind) is not None
    list(shard)
    order = list(theirs)
    assert torch.equal(ours_gen.get_state(), their_gen.get_state())
    assert list(ours) == order


@SETTINGS
@given(
    st.lists(st.integers(1, 9), max_size=40),
    st.integers(1, 8),
    st.booleans(),
)
def test_varying_batch_sizes_cover_every_sample(sizes: list[int], num_processes: int, even: bool) -> None:
    """A batch sampler with varying batch sizes and no ``batch_size``: whole batches are dealt out."""
    bounds = list(itertools.accumulate([0, *sizes]))
    batches = [list(range(lo, hi)) for lo, hi in itertools.pairwise(bounds)]
    order = [index for batch in batches for index in batch]
    per_rank = [
        list(BatchSamplerShard(batches, num_processes=num_processes, process_index=rank, even_batches=even))
        for rank in range(num_processes)
    ]
    dealt = [batch for step in itertools.zip_longest(*per_rank) for batch in step if batch is not None]
    if not even:
        assert dealt == batches
        return
    assert len({len(mine) for mine in per_rank}) == 1
    assert dealt[: len(batches)] == batches
    padding = [index for batch in dealt[len(batches) :] for index in batch]
    assert padding == list(itertools.islice(itertools.cycle(order), len(padding)))
    assert len(dealt) - len(batches) < num_processes
