"""Differential tests: our core samplers against the reference (``accelerate.data_loader``).

Every configuration is checked on all ``N`` processes at once, looping over ``process_index`` in one
process. For each rank we compare, epoch by epoch, what the reference's ``BatchSamplerShard`` yields
with what ours yields on its fast path (``list(shard)``) and on its generic path
(``shard._iter_generic()``), check ``len(shard)`` against the number of batches iterated, and, for
random samplers, that the generator (or the global torch RNG) ends in the reference's state.

Documented differences from the reference (README, docs/DESIGN.md, "Differences from the reference") that the checks respect:
``len()`` is compared with the reference only where the reference's is exact; the reference's
``SeedableRandomSampler`` bumps its epoch after ``__iter__`` and ours does not, so both get
``set_epoch(e)`` before epoch ``e``; and ``split_batches`` with a batch size that is not a multiple of
``N`` is an error in ours, so those configurations check only that ours raises.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from accelerate import data_loader as ref
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from lightning_shard import BatchSamplerShard, IterableDatasetShard, SeedableRandomSampler
from lightning_shard.sampling.fast_index import fast_epoch_order
from tests.helpers.datasets import IdStream

MAX_LENGTH = 200
MAX_BATCH_SIZE = 17
MAX_PROCESSES = 8
MIN_CONFIGURATIONS = 5000

FLAGS = [(split, even, drop) for split in (False, True) for even in (False, True) for drop in (False, True)]

# Sampler kinds. "fast" kinds take our vectorised path; the others only the generic one.
SEQUENTIAL = "sequential"
RANDOM_GENERATOR = "random_generator"  # RandomSampler with a seeded user generator
RANDOM_GLOBAL = "random_global"  # RandomSampler without generator: draws its seed from the global RNG
SEEDABLE = "seedable"  # SeedableRandomSampler, ours vs theirs, same data_seed
SEEDABLE_GENERATOR = "seedable_generator"  # the same with a user generator
SUBCLASS = "subclass"  # a BatchSampler subclass (has batch_size, takes the generic path)
VARYING = "varying"  # a custom batch sampler with varying batch sizes and no batch_size attribute
BATCH_KINDS = [SEQUENTIAL, RANDOM_GENERATOR, RANDOM_GLOBAL, SEEDABLE, SEEDABLE_GENERATOR, SUBCLASS, VARYING]
FAST_KINDS = {SEQUENTIAL, RANDOM_GENERATOR, RANDOM_GLOBAL, SEEDABLE, SEEDABLE_GENERATOR}
RANDOM_KINDS = {RANDOM_GENERATOR, RANDOM_GLOBAL, SEEDABLE, SEEDABLE_GENERATOR, SUBCLASS}
EPOCHS = {SEQUENTIAL: 1, RANDOM_GENERATOR: 2, RANDOM_GLOBAL: 2, SEEDABLE: 3, SEEDABLE_GENERATOR: 2}

OURS_FAST, OURS_GENERIC, REFERENCE = "ours (fast path)", "ours (generic path)", "reference"


@dataclass(frozen=True)
class Config:
    """One sharding configuration; every rank of it is checked."""

    kind: str
    length: int
    batch_size: int
    num_processes: int
    split_batches: bool
    even_batches: bool
    drop_last: bool
    seed: int = 0


class SubclassBatchSampler(BatchSampler):
    """A plain ``BatchSampler`` in all but type, so the fast path must step aside."""


class VaryingBatchSampler:
    """Batches of varying sizes (sometimes empty) over ``range(length)``; no ``batch_size`` attribute."""

    def __init__(self, length: int, max_size: int, seed: int, drop_last: bool) -> None:
        rng = random.Random(seed)
        self.batches: list[list[int]] = []
        start = 0
        while start < length:
            size = 0 if rng.random() < 0.05 else rng.randint(1, max_size)
            self.batches.append(list(range(start, min(start + size, length))))
            start += size
        self.drop_last = drop_last

    @staticmethod
    def has_empty(cfg: Config) -> bool:
        """Whether the sampler built for ``cfg`` yields an empty batch."""
        sampler = VaryingBatchSampler(cfg.length, cfg.batch_size, cfg.seed, cfg.drop_last)
        return any(not batch for batch in sampler.batches)

    def __iter__(self) -> Iterator[list[int]]:
        # NOTE: fresh lists, as the reference extends the last batch in place when it pads.
        return (list(batch) for batch in self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _sampler(cfg: Config, reference: bool) -> Any:
    data = range(cfg.length)
    seedable = ref.SeedableRandomSampler if reference else SeedableRandomSampler
    if cfg.kind == SEQUENTIAL:
        return SequentialSampler(data)
    if cfg.kind in (RANDOM_GENERATOR, SUBCLASS):
        return RandomSampler(data, generator=_generator(cfg.seed))
    if cfg.kind == RANDOM_GLOBAL:
        return RandomSampler(data)
    if cfg.kind == SEEDABLE:
        return seedable(data, data_seed=cfg.seed)
    return seedable(data, generator=_generator(cfg.seed + 7), data_seed=cfg.seed)


def _batch_sampler(cfg: Config, reference: bool) -> Any:
    if cfg.kind == VARYING:
        return VaryingBatchSampler(cfg.length, cfg.batch_size, cfg.seed, cfg.drop_last)
    cls = SubclassBatchSampler if cfg.kind == SUBCLASS else BatchSampler
    return cls(_sampler(cfg, reference), batch_size=cfg.batch_size, drop_last=cfg.drop_last)


@dataclass
class Run:
    """What one side yielded on one rank: batches per epoch, ``len()`` per epoch, end RNG state."""

    epochs: list[list[list[int]]]
    lengths: list[int]
    rng_state: torch.Tensor | None


def _shard(cfg: Config, side: str, rank: int) -> Any:
    cls = ref.BatchSamplerShard if side == REFERENCE else BatchSamplerShard
    return cls(
        _batch_sampler(cfg, side == REFERENCE),
        num_processes=cfg.num_processes,
        process_index=rank,
        split_batches=cfg.split_batches,
        even_batches=cfg.even_batches,
    )


def _set_epoch(shard: Any, side: str, epoch: int) -> None:
    if side == REFERENCE:
        # NOTE: the reference's BatchSamplerShard has no `set_epoch`; set it on the sampler directly.
        sampler = getattr(shard.batch_sampler, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
    else:
        shard.set_epoch(epoch)


def _end_state(cfg: Config, shard: Any) -> torch.Tensor | None:
    if cfg.kind == RANDOM_GLOBAL:
        return torch.get_rng_state()
    if cfg.kind in (RANDOM_GENERATOR, SEEDABLE_GENERATOR, SUBCLASS):
        return shard.batch_sampler.sampler.generator.get_state()
    return None


def run_side(cfg: Config, side: str, rank: int) -> Run:
    """Iterate ``rank``'s shard for every epoch of ``cfg`` on one side."""
    if cfg.kind == RANDOM_GLOBAL:
        torch.manual_seed(cfg.seed)
    shard = _shard(cfg, side, rank)
    epochs, lengths = [], []
    for epoch in range(EPOCHS.get(cfg.kind, 1)):
        _set_epoch(shard, side, epoch)
        lengths.append(len(shard) if side != REFERENCE or _reference_len_exact(cfg) else -1)
        batches = shard._iter_generic() if side == OURS_GENERIC else iter(shard)
        epochs.append([list(batch) for batch in batches])
    return Run(epochs, lengths, _end_state(cfg, shard))


def _reference_len_exact(cfg: Config) -> bool:
    # NOTE: documented difference: with split_batches and even_batches=False the reference counts a
    # batch even for processes that get no slice of the short last batch.
    return not (cfg.split_batches and not cfg.even_batches)


def known_len_bug(cfg: Config) -> bool:
    """Configurations where our ``len()`` is known to differ from what iteration yields.

    NOTE: a known limitation (README), pinned by the strict xfail test below: a batch sampler that
    yields an empty batch: the empty batch is never yielded (as in the reference) but ``len()`` counts
    it. When a fix lands, that test fails and this predicate must go.
    """
    return cfg.kind == VARYING and VaryingBatchSampler.has_empty(cfg)


def _first_difference(a: Run, b: Run) -> str:
    for epoch, (x, y) in enumerate(zip(a.epochs, b.epochs, strict=False)):
        if x != y:
            at = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
            return (
                f"epoch {epoch}: {len(x)} vs {len(y)} batches, first difference at batch {at}: "
                f"{x[at] if at < len(x) else None} vs {y[at] if at < len(y) else None}; "
                f"full: {x} vs {y}"
            )
    return "RNG state after the run differs"


def _same(a: Run, b: Run) -> bool:
    if a.epochs != b.epochs:
        return False
    return a.rng_state is None or b.rng_state is None or torch.equal(a.rng_state, b.rng_state)


def _assert_same(a: Run, b: Run, what: str) -> None:
    if not _same(a, b):
        pytest.fail(f"{what}: {_first_difference(a, b)}")


def _expect_split_error(cfg: Config) -> bool:
    return cfg.split_batches and (cfg.kind == VARYING or cfg.batch_size % cfg.num_processes != 0)


def check_batch_config(cfg: Config) -> None:
    """Compare every rank of ``cfg``: reference vs our fast path vs our generic path, and ``len()``."""
    if _expect_split_error(cfg):
        for rank in range(cfg.num_processes):
            with pytest.raises(ValueError, match="split_batches"):
                _shard(cfg, OURS_FAST, rank)
            with pytest.raises(ValueError, match="split_batches"):
                _shard(cfg, REFERENCE, rank)
        return
    fast = fast_epoch_order(_shard(cfg, OURS_FAST, 0).kind) is not None
    assert fast == (cfg.kind in FAST_KINDS), f"{cfg}: fast path taken: {fast}"
    for rank in range(cfg.num_processes):
        theirs = run_side(cfg, REFERENCE, rank)
        ours = run_side(cfg, OURS_FAST, rank)
        _assert_same(ours, theirs, f"{cfg} rank {rank}, ours vs reference")
        if cfg.kind in FAST_KINDS:
            _assert_same(ours, run_side(cfg, OURS_GENERIC, rank), f"{cfg} rank {rank}, fast vs generic path")
        counts = [len(batches) for batches in ours.epochs]
        if not known_len_bug(cfg):
            assert ours.lengths == counts, f"{cfg} rank {rank}: len() {ours.lengths}, iterated {counts}"
        if _reference_len_exact(cfg):
            assert ours.lengths == theirs.lengths, f"{cfg} rank {rank}: len() vs reference's"


def check_iterable_config(length: int, batch_size: int, num_processes: int, split: bool, drop: bool) -> None:
    """Compare every rank of an ``IterableDatasetShard`` configuration with the reference's."""
    kwargs: dict[str, Any] = dict(batch_size=batch_size, drop_last=drop, num_processes=num_processes)
    kwargs["split_batches"] = split
    dataset = IdStream(random.Random(length).sample(range(length), length))  # a fixed shuffle
    if split and batch_size % num_processes != 0:
        with pytest.raises(ValueError, match="split_batches"):
            IterableDatasetShard(dataset, process_index=0, **kwargs)
        return
    for rank in range(num_processes):
        ours = IterableDatasetShard(dataset, process_index=rank, **kwargs)
        theirs = ref.IterableDatasetShard(dataset, process_index=rank, **kwargs)
        mine, expected = list(ours), list(theirs)
        config = f"IterableDatasetShard(length={length}, rank={rank}, {kwargs})"
        assert mine == expected, f"{config}: ours {mine} vs reference {expected}"
        assert len(ours) == len(mine), f"{config}: len() {len(ours)}, iterated {len(mine)}"
        if not split:
            assert len(ours) == len(theirs), f"{config}: len() vs reference's"


def _draw_length(rng: random.Random, batch_size: int, num_processes: int, minimum: int) -> int:
    """A dataset length, biased towards the edges: empty, under one batch, around global batches."""
    roll = rng.random()
    if roll < 0.15:
        return max(minimum, rng.randint(0, batch_size))
    if roll < 0.45:
        rounds = rng.randint(1, max(1, MAX_LENGTH // (batch_size * num_processes)))
        return max(minimum, min(MAX_LENGTH, rounds * batch_size * num_processes + rng.randint(-1, 1)))
    return rng.randint(minimum, MAX_LENGTH)


def _draw_sizes(rng: random.Random, kind: str, split: bool) -> tuple[int, int, int]:
    num_processes = rng.randint(1, MAX_PROCESSES)
    if split and kind != VARYING and rng.random() < 0.85:
        # NOTE: mostly valid split configurations; the rest check the error.
        batch_size = num_processes * rng.randint(1, max(1, MAX_BATCH_SIZE // num_processes))
    else:
        batch_size = rng.randint(1, MAX_BATCH_SIZE)
    minimum = 1 if kind in RANDOM_KINDS else 0  # NOTE: torch's RandomSampler refuses an empty dataset.
    return _draw_length(rng, batch_size, num_processes, minimum), batch_size, num_processes


def batch_grid(per_cell: int, seed: int) -> Iterator[Config]:
    """Seeded configurations: ``per_cell`` for every sampler kind and flag combination."""
    rng = random.Random(seed)
    for kind in BATCH_KINDS:
        for split, even, drop in FLAGS:
            for _ in range(per_cell):
                length, batch_size, num_processes = _draw_sizes(rng, kind, split)
                yield Config(kind, length, batch_size, num_processes, split, even, drop, rng.randrange(2**31))


def iterable_grid(per_cell: int, seed: int) -> Iterator[tuple[int, int, int, bool, bool]]:
    """Seeded ``IterableDatasetShard`` configurations: ``per_cell`` for each ``(split, drop_last)``."""
    rng = random.Random(seed)
    for split in (False, True):
        for drop in (False, True):
            for _ in range(per_cell):
                length, batch_size, num_processes = _draw_sizes(rng, "iterable", split)
                yield length, batch_size, num_processes, split, drop


def _count(checks: Iterator[Any], check: Callable[..., None]) -> int:
    count = 0
    for args in checks:
        check(*args) if isinstance(args, tuple) else check(args)
        count += 1
    return count


def test_grid_against_reference() -> None:
    """At least 5,000 generated configurations, every kind and flag combination, all ranks each."""
    count = _count(batch_grid(per_cell=92, seed=2024), check_batch_config)
    count += _count(iterable_grid(per_cell=120, seed=2025), check_iterable_config)
    assert count >= MIN_CONFIGURATIONS


def test_small_exhaustive_corner() -> None:
    """Every combination on a small exhaustive corner: lengths 0..12, batch sizes 1..4, N 1..4."""
    count = 0
    for length in range(13):
        for batch_size in range(1, 5):
            for num_processes in range(1, 5):
                for split, even, drop in FLAGS:
                    for kind in (SEQUENTIAL, VARYING) if length == 0 else (SEQUENTIAL, SEEDABLE, VARYING):
                        cfg = Config(kind, length, batch_size, num_processes, split, even, drop, seed=length)
                        check_batch_config(cfg)
                        count += 1
                    if not even:
                        check_iterable_config(length, batch_size, num_processes, split, drop)
    assert count > 0


@st.composite
def configs(draw: st.DrawFn) -> Config:
    kind = draw(st.sampled_from(BATCH_KINDS))
    num_processes = draw(st.integers(1, MAX_PROCESSES))
    split = draw(st.booleans())
    if split and kind != VARYING:
        batch_size = num_processes * draw(st.integers(1, max(1, MAX_BATCH_SIZE // num_processes)))
    else:
        batch_size = draw(st.integers(1, MAX_BATCH_SIZE))
    length = draw(st.integers(1 if kind in RANDOM_KINDS else 0, MAX_LENGTH))
    even, drop, seed = draw(st.booleans()), draw(st.booleans()), draw(st.integers(0, 2**31 - 1))
    return Config(kind, length, batch_size, num_processes, split, even, drop, seed)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(configs())
def test_hypothesis_configs_against_reference(cfg: Config) -> None:
    check_batch_config(cfg)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    length=st.integers(0, MAX_LENGTH),
    num_processes=st.integers(1, MAX_PROCESSES),
    per_process=st.integers(1, MAX_BATCH_SIZE),
    split=st.booleans(),
    drop=st.booleans(),
)
def test_hypothesis_iterable_against_reference(
    length: int, num_processes: int, per_process: int, split: bool, drop: bool
) -> None:
    batch_size = per_process * num_processes if split else per_process
    check_iterable_config(length, batch_size, num_processes, split, drop)


def test_len_generic_split_uneven_matches_iteration() -> None:
    """6 samples, global batch 10 split over 5 processes: ranks 3 and 4 get no slice of the short batch."""
    sampler = SubclassBatchSampler(SequentialSampler(range(6)), batch_size=10, drop_last=False)
    for rank in range(5):
        shard = BatchSamplerShard(sampler, 5, rank, split_batches=True, even_batches=False)
        assert len(shard) == len(list(shard)), f"rank {rank}"


@pytest.mark.xfail(strict=True, reason="bug: len() counts an empty batch that is never yielded")
def test_len_with_empty_batch_matches_iteration() -> None:
    """A batch sampler yielding ``[[0, 1], []]`` on 3 processes: rank 1's empty last batch is dropped."""
    batches = [[0, 1], []]
    for even in (False, True):
        for rank in range(3):
            shard = BatchSamplerShard(batches, num_processes=3, process_index=rank, even_batches=even)
            assert len(shard) == len(list(shard)), f"even_batches={even}, rank {rank}"
