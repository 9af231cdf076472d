"""Resumption, fuzzed (docs/DESIGN.md, "Global state", "Elastic resume"): stop anywhere, save, load into a fresh loader, compare the rest.

One process, looping over every ``process_index`` (shard mode needs no process group). For each
generated configuration and every number ``k`` of batches a process has yielded (over one or two
epochs), ``uninterrupted[:k] + resumed == uninterrupted``, and the saved state is the same on every
process. Elastic: a state saved by ``N`` processes, loaded by ``M``, gives every sample not yet seen
exactly once over the new processes, plus end-of-epoch padding only where padding is promised.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from tests.helpers.datasets import IdMap, ShuffledIdStream

SEED = 1234
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "250")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass(frozen=True)
class Config:
    iterable: bool
    length: int
    batch_size: int
    split_batches: bool
    even_batches: bool
    drop_last: bool
    shuffle: str | None  # None, "seedable" (SeedableRandomSampler) or "generator" (a seeded generator)
    epochs: int

    def global_batch(self, num_processes: int) -> int:
        return self.batch_size if self.split_batches else self.batch_size * num_processes

    def loader(self, num_processes: int, process_index: int) -> Any:
        """A freshly prepared loader, as a restarted run would build it."""
        if self.iterable:
            stream = ShuffledIdStream(self.length, self.shuffle is not None)
            source = DataLoader(stream, batch_size=self.batch_size, drop_last=self.drop_last)
        else:
            generator = torch.Generator().manual_seed(SEED) if self.shuffle == "generator" else None
            source = DataLoader(
                IdMap(self.length),
                batch_size=self.batch_size,
                shuffle=self.shuffle is not None,
                generator=generator,
                drop_last=self.drop_last,
            )
        return prepare_data_loader(
            source,
            num_processes=num_processes,
            process_index=process_index,
            split_batches=self.split_batches,
            even_batches=self.even_batches,
            use_seedable_sampler=self.shuffle == "seedable",
            data_seed=SEED,
        )


@st.composite
def configs(draw: st.DrawFn, max_processes: int = 4) -> tuple[Config, int]:
    num_processes = draw(st.integers(1, max_processes))
    split_batches = draw(st.booleans())
    per = draw(st.integers(1, 4 if split_batches else 7))
    iterable = draw(st.booleans())
    length = draw(st.integers(0, 60))
    # NOTE: torch's `RandomSampler` refuses an empty dataset, so `DataLoader(shuffle=True)` cannot be built.
    shuffles = [None, "generator"] if iterable else [None, "seedable", "generator"] if length else [None]
    config = Config(
        iterable=iterable,
        length=length,
        batch_size=per * num_processes if split_batches else per,
        split_batches=split_batches,
        even_batches=draw(st.booleans()),
        drop_last=draw(st.booleans()),
        shuffle=draw(st.sampled_from(shuffles)),
        epochs=draw(st.integers(1, 2)),
    )
    return config, num_processes


def run(loader: Any, epochs: int) -> tuple[list[list[int]], list[dict[str, Any]]]:
    """Every batch over ``epochs`` epochs, and the state after each number of batches (0, 1, ...)."""
    batches: list[list[int]] = []
    states = [loader.state_dict()]
    for _ in range(epochs):
        for batch in loader:
            batches.append(batch.tolist())
            states.append(loader.state_dict())
    return batches, states


def resumed(config: Config, num_processes: int, process_index: int, state: dict[str, Any]) -> list[list[int]]:
    """What a fresh loader yields after ``load_state_dict(state)``, to the end of the last epoch."""
    loader = config.loader(num_processes, process_index)
    loader.load_state_dict(state)
    batches: list[list[int]] = []
    for _ in range(state["epoch"], config.epochs):
        batches.extend(batch.tolist() for batch in loader)
    return batches


@FUZZ
@given(configs())
def test_resume_after_any_number_of_batches_continues_exactly(case: tuple[Config, int]) -> None:
    config, num_processes = case
    runs = [run(config.loader(num_processes, rank), config.epochs) for rank in range(num_processes)]
    for rank, (batches, states) in enumerate(runs):
        for k, state in enumerate(states):
            assert batches[:k] + resumed(config, num_processes, rank, state) == batches, (rank, k, state)
    # The state is global: at the same point of an epoch, every process saves the same state.
    by_position: dict[tuple[int, int], dict[str, Any]] = {}
    for _, states in runs:
        for state in states:
            assert by_position.setdefault((state["epoch"], state["steps"]), state) == state, state


def flat(batches: list[list[int]]) -> list[int]:
    return [index for batch in batches for index in batch]


def check_elastic(config: Config, old: int, new: int, k: int, state: dict[str, Any], seen: list[int]) -> None:
    """``new`` processes resume the state ``old`` processes saved after ``k`` batches each."""
    rest = flat([b for rank in range(new) for b in resumed(config, new, rank, state)])
    unseen = set(range(config.length)) - set(seen)
    counts = Counter(rest)
    where = (old, new, k)
    if config.drop_last:
        # No padding; at most the last incomplete global batch is dropped.
        assert max(counts.values(), default=1) == 1, where
        assert set(rest) <= unseen, where
        assert len(unseen) - len(rest) < config.global_batch(new), where
        return
    assert set(rest) >= unseen, where
    padded = new > 1 and (config.even_batches or config.iterable)
    if not padded:
        assert counts == Counter(unseen), where
        return
    # Every unseen sample at least once; anything more is end-of-epoch padding, less than a global batch.
    assert len(rest) - len(unseen) < config.global_batch(new), where


@FUZZ
@given(configs(), st.integers(1, 4))
def test_elastic_resume_sees_every_unseen_sample_once(case: tuple[Config, int], new: int) -> None:
    config, old = case
    config = Config(**{**config.__dict__, "epochs": 1})
    if config.split_batches and config.batch_size % new:
        new = math.gcd(config.batch_size, new)
    runs = [run(config.loader(old, rank), 1) for rank in range(old)]
    common = min(len(batches) for batches, _ in runs)
    for k in range(common + 1):
        seen = flat([b for batches, _ in runs for b in batches[:k]])
        check_elastic(config, old, new, k, runs[0][1][k], seen)


def with_workers(rank: int, stateful: bool) -> Any:
    """Process ``rank`` of 2 over 23 shuffled samples, loaded by 2 worker processes."""
    generator = torch.Generator().manual_seed(SEED)
    source = DataLoader(IdMap(23), batch_size=3, shuffle=True, generator=generator, num_workers=2)
    return prepare_data_loader(source, num_processes=2, process_index=rank, use_stateful_dataloader=stateful)


@pytest.mark.parametrize("stateful", [False, True], ids=["DataLoader", "StatefulDataLoader"])
def test_resume_with_worker_processes_continues_exactly(stateful: bool) -> None:
    """The same with ``num_workers=2`` (docs/DESIGN.md, "Global state"): the rest matches a run without workers."""
    config = Config(False, 23, 3, False, True, False, "generator", 1)
    for rank in range(2):
        batches, states = run(config.loader(2, rank), 1)
        for k in (0, 1, len(batches) - 1, len(batches)):
            loader = with_workers(rank, stateful)
            loader.load_state_dict(states[k])
            assert batches[:k] + [batch.tolist() for batch in loader] == batches, (rank, k)
