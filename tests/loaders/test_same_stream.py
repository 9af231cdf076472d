"""A strided stream is checked to be the same on every process, its first two global batches before the
first is yielded and more at doubling intervals (docs/DESIGN.md, "Streams that split themselves"): a stream
that splits itself by rank without saying so is refused on every process before its first batch, also when
its elements share labels or tags, and also when it splits only after its first global batch; a stream whose
elements are random but named (augmentation) is not, nor one drawing from torch's generator (masking), which
the package makes draw alike; one drawing from a generator of its own is refused with both ways out, and the
one that fits holds."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from tests.helpers.datasets import (
    AugmentedIdStream,
    DeclaredNoiseStream,
    DeclaredOwnRandomMaskedTokenStream,
    IdStream,
    LabelledRankSplitStream,
    LateSplitIdStream,
    MaskedTokenStream,
    NoiseStream,
    OwnRandomMaskedTokenStream,
    TaggedRankSplitStream,
    UndeclaredRankSplitIdStream,
    WorkerSplitIdStream,
    id_shards,
)
from tests.helpers.dist import progress, run_distributed

pytestmark = pytest.mark.dist

BOUND = 120.0
"""Seconds without a finished scenario after which every process is killed: each takes well under a
second alone; generous for 2 cores shared with other test runs."""


def _epochs(dataset: Any, workers: int, epochs: int = 2, **options: Any) -> dict[str, Any]:
    """Each epoch's batches (with a collective after each, as DDP's step), or the error and the batches
    yielded before it."""
    context = "fork" if workers else None
    loader = prepare_data_loader(
        DataLoader(dataset, batch_size=2, num_workers=workers, multiprocessing_context=context), **options
    )
    seen: list[Any] = []
    try:
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                seen.append(batch)
                dist.all_reduce(torch.ones(1))
    except RuntimeError as error:
        return {"error": str(error), "batches": len(seen)}
    # NOTE: plain lists: a tensor returned to the test process shares its memory through the rank, which ends.
    first = seen[0] if isinstance(seen[0], dict) else {"x": seen[0]}
    ids = [
        int(i) for batch in seen if isinstance(batch, dict) and "pos" in batch for i in batch["pos"].flatten()
    ]
    return {
        "error": None,
        "batches": len(seen),
        "first": {key: value.tolist() for key, value in first.items()},
        "ids": ids,
    }


SCENARIOS = {
    f"{name}{workers}": (make, workers)
    for workers in (0, 2)
    for name, make in {
        "same": lambda: IdStream(16),
        "worker_split": lambda: WorkerSplitIdStream(16),
        "rank_split": lambda: UndeclaredRankSplitIdStream(id_shards([4, 4, 4, 4])),
        "augmented": lambda: AugmentedIdStream(16),
        "noise": lambda: NoiseStream(16),
        "declared_noise": lambda: DeclaredNoiseStream(16),
        "labelled_split": lambda: LabelledRankSplitStream(16),
        "tagged_split": lambda: TaggedRankSplitStream(16),
        "late_split": lambda: LateSplitIdStream(16, head=4),
        "masked": lambda: MaskedTokenStream(16),
        "own_random": lambda: OwnRandomMaskedTokenStream(16),
        "declared_own_random": lambda: DeclaredOwnRandomMaskedTokenStream(16),
    }.items()
    if not (workers and name == "same")  # NOTE: a stream that does not split among workers is read W times
}


def scenarios(rank: int, world_size: int) -> dict[str, Any]:
    results = {}
    for name, (make, workers) in SCENARIOS.items():
        results[name] = _epochs(make(), workers)
        progress(name)
    return results


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_distributed(scenarios, 2, timeout=BOUND, daemon=False)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stream_that_splits_itself_unsaid_is_refused_on_every_process_before_its_first_batch(
    results: list[dict[str, Any]], workers: int
) -> None:
    for rank, result in enumerate(results):
        outcome = result[f"rank_split{workers}"]
        assert outcome["batches"] == 0, outcome
        error = outcome["error"]
        assert "`UndeclaredRankSplitIdStream`" in error and "`splits_by_rank = True`" in error, error
        assert f"This process ({rank} of 2) read: " in error, error
        _both_ways_out(error, "UndeclaredRankSplitIdStream")


def _both_ways_out(error: str, name: str) -> None:
    """A refusal names both declarations, each with what it does when it does not fit."""
    assert "declare `splits_by_rank = True`" in error, error
    assert f"`splits_by_rank = False` on `{name}`" in error, error
    assert "every sample would be trained 2 times" in error and "1 of every 2 samples would never" in error, (
        error
    )


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    ("name", "cls", "shown"),
    [
        ("labelled_split", "LabelledRankSplitStream", "]), 0), (tensor(["),
        ("tagged_split", "TaggedRankSplitStream", "'lang': 'en'"),
        ("late_split", "LateSplitIdStream", ""),
    ],
)
def test_a_stream_splitting_itself_behind_shared_labels_or_after_its_first_batch_is_refused_before_it(
    results: list[dict[str, Any]], workers: int, name: str, cls: str, shown: str
) -> None:
    """0.4.0 took a label or a tag shared by every process's first batch for the elements' identity, and
    compared only the first global batch: 48 of 96 ids never trained, exit 0."""
    for result in results:
        outcome = result[f"{name}{workers}"]
        assert outcome["batches"] == 0, outcome
        error = outcome["error"]
        assert error is not None and f"`{cls}`" in error, outcome
        assert "(their whole contents compared)" in error, error
        assert shown in error, error
        _both_ways_out(error, cls)


@pytest.mark.parametrize("workers", [0, 2])
def test_masking_drawn_from_torchs_generator_is_drawn_alike_and_every_id_is_read_once(
    results: list[dict[str, Any]], workers: int
) -> None:
    """0.4.0 refused a same stream randomising whole-number fields and offered only the declaration that
    trains every id twice."""
    for result in results:
        assert result[f"masked{workers}"]["error"] is None, result[f"masked{workers}"]
    ids = [result[f"masked{workers}"]["ids"] for result in results]
    assert sorted(ids[0] + ids[1]) == sorted(list(range(16)) * 2), "each id once an epoch, 2 epochs"
    assert not set(ids[0][:2]) & set(ids[1][:2]), "each process its own slice"


@pytest.mark.parametrize("workers", [0, 2])
def test_draws_of_a_generator_of_its_own_are_refused_with_both_ways_out_and_the_fitting_one_holds(
    results: list[dict[str, Any]], workers: int
) -> None:
    for result in results:
        outcome = result[f"own_random{workers}"]
        assert outcome["batches"] == 0 and outcome["error"] is not None, outcome
        _both_ways_out(outcome["error"], "OwnRandomMaskedTokenStream")
        declared = result[f"declared_own_random{workers}"]
        assert declared["error"] is None and declared["batches"] == 8, declared


@pytest.mark.parametrize("name", ["same0", "worker_split0", "worker_split2", "augmented0", "augmented2"])
def test_a_stream_that_is_the_same_everywhere_passes_even_with_random_elements(
    results: list[dict[str, Any]], name: str
) -> None:
    for result in results:
        assert result[name]["error"] is None, result[name]
        assert result[name]["batches"] == 8, "4 steps an epoch, 2 epochs"
    firsts = [result[name]["first"] for result in results]
    if name.startswith("augmented"):
        assert firsts[0]["id"] != firsts[1]["id"], "each process its own slice"
        noise = [torch.tensor(first["x"]) - torch.tensor(first["id"])[:, None] for first in firsts]
        assert not torch.equal(*noise), "each process drew its own augmentation"


@pytest.mark.parametrize("workers", [0, 2])
def test_unnamed_random_elements_are_refused_with_the_opt_out_which_then_holds(
    results: list[dict[str, Any]], workers: int
) -> None:
    for result in results:
        error = result[f"noise{workers}"]["error"]
        assert error is not None and "`splits_by_rank = False` on `NoiseStream`" in error, error
        declared = result[f"declared_noise{workers}"]
        assert declared["error"] is None and declared["batches"] == 8, declared
