"""Streams on a real 2-process gloo group (docs/DESIGN.md, "Streaming data"): uneven shares never hang and
never silently drop, a resumed epoch continues exactly, and the strided fallback stays the reference's.

Every scenario runs in one launch; each batch and each scenario's end is reported (``progress``), so
``run_distributed``'s bound is the time without a batch: it kills a hang, not a slow machine (under load,
one scenario, ``worker_change``, took 160 s here). A training loop is
imitated by an ``all_reduce`` after every batch, as DDP's gradient sync does: a process that took a
step the other did not take would block there.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from accelerate.data_loader import IterableDatasetShard as ReferenceShard
from torch.utils.data import DataLoader

from lightning_shard import WorkerCountWarning, prepare_data_loader
from lightning_shard.loaders.position import PAD, SAME, DataKind
from lightning_shard.loaders.streams import StreamRun
from tests.helpers.datasets import IdShardsStream, IdStream, RankSplitIdStream, id_shards
from tests.helpers.dist import progress, run_distributed
from tests.helpers.hf import hf_id_stream

pytestmark = pytest.mark.dist

BOUND = 120.0
"""Seconds without a batch or a finished scenario after which every process is killed: a batch takes
well under a second; generous for 2 cores shared with other test runs."""

LENGTHS = [10, 3, 17, 1, 9]
"""Process 0's share holds ids 0-29 (3 shards), process 1's ids 30-39 (2 shards)."""


def _ids(batch: Any) -> list[int]:
    return [int(i) for i in (batch["id"] if isinstance(batch, dict) else batch)]


def train(loader: Any, steps: int | None = None) -> list[list[int]]:
    """The ids of each batch, with a collective after every one (as DDP), for ``steps`` batches or all."""
    seen = []
    for batch in loader:
        seen.append(_ids(batch))
        dist.all_reduce(torch.ones(1))
        progress("batch")  # NOTE: a batch is progress: the bound then fires only when no batch comes
        if steps is not None and len(seen) == steps:
            break
    return seen


def _loader(dataset: Any, workers: int, persistent: bool = False) -> DataLoader:
    # NOTE: forked workers: the ranks are started by a fork server, which makes it their default start
    # method, and a fork server imports torch anew for every loader's workers (seconds each).
    context = "fork" if workers else None
    return DataLoader(
        dataset,
        batch_size=4,
        num_workers=workers,
        persistent_workers=persistent,
        multiprocessing_context=context,
    )


def _hf(workers: int, even: bool = True, **kwargs: Any) -> Any:
    return prepare_data_loader(_loader(hf_id_stream(LENGTHS), workers), even_batches=even, **kwargs)


def uneven(rank: int, workers: int) -> dict[str, Any]:
    pad, shortest = _hf(workers), _hf(workers, even=False)
    return {
        "pad": train(pad),
        "pad_report": pad.stream.report,
        "shortest": train(shortest),
        "shortest_report": shortest.stream.report,
    }


def resumed(rank: int, workers: int, stop: int) -> dict[str, Any]:
    """An uninterrupted epoch; one stopped after ``stop`` steps, its state loaded into a new loader."""
    shuffled = hf_id_stream(LENGTHS).shuffle(seed=3, buffer_size=4)
    make = lambda: prepare_data_loader(_loader(shuffled, workers, persistent=workers > 0))  # noqa: E731
    full = make()
    full.set_epoch(1)
    whole = train(full)
    first = make()
    first.set_epoch(1)
    head = train(first, stop)
    state = first.state_dict()
    again = make()
    again.load_state_dict(state)
    ends = full.stream.report.ended_at
    return {"whole": whole, "head": head, "tail": train(again), "state": state, "ends": ends}


def worker_change(rank: int, saved: int, resumed: int, hf: bool) -> dict[str, Any]:
    """An epoch stopped with ``saved`` workers (process 1 padding by then), resumed with ``resumed``."""
    dataset = (
        hf_id_stream(LENGTHS).shuffle(seed=3, buffer_size=4) if hf else IdShardsStream(id_shards(LENGTHS))
    )
    make = lambda workers: prepare_data_loader(_loader(dataset, workers))  # noqa: E731
    full = make(saved)
    whole = train(full)
    first = make(saved)
    head = train(first, 5)
    state = first.state_dict()
    again = make(resumed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again.load_state_dict(state)
    batches = iter(again)
    step = _ids(next(batches))
    dist.all_reduce(torch.ones(1))
    middle = again.state_dict()
    tail = [step, *train(batches)]
    following = train(again)
    fresh = make(resumed)
    train(fresh)
    third = make(resumed)
    third.load_state_dict(middle)
    return {
        "whole": whole,
        "head": head,
        "tail": tail,
        "state": state,
        "middle": middle,
        "warned": [str(w.message) for w in caught if issubclass(w.category, WorkerCountWarning)],
        "following": following,
        "fresh": train(fresh),
        "third": train(third),
        "ends": full.stream.report.ended_at,
    }


def passed_through(rank: int) -> list[list[int]]:
    from datasets.distributed import split_dataset_by_node

    split = split_dataset_by_node(hf_id_stream(LENGTHS), rank=rank, world_size=2)
    own = prepare_data_loader(DataLoader(RankSplitIdStream([[0, 1], [2, 3, 4], [5], [6, 7]]), batch_size=2))
    return [train(own), train(prepare_data_loader(DataLoader(split, batch_size=4)))]


def fallback(rank: int) -> dict[str, Any]:
    one_shard = hf_id_stream([11])
    ours = train(prepare_data_loader(DataLoader(one_shard, batch_size=2)))
    reference = ReferenceShard(one_shard, batch_size=2, num_processes=2, process_index=rank)
    empty_share = prepare_data_loader(DataLoader(hf_id_stream([5, 0]), batch_size=2))
    try:
        train(empty_share)
        error = None
    except RuntimeError as caught:
        error = str(caught)
    return {
        "ours": ours,
        "reference": [b["id"].tolist() for b in DataLoader(reference, batch_size=2)],
        "empty": error,
    }


def strided_shortest(rank: int) -> list[list[int]]:
    return train(prepare_data_loader(DataLoader(IdStream(9), batch_size=2), even_batches=False))


SCENARIOS: dict[str, Callable[[int], Any]] = {
    "uneven0": lambda rank: uneven(rank, 0),
    "uneven2": lambda rank: uneven(rank, 2),
    "resumed_padding": lambda rank: resumed(rank, 2, stop=6),
    "resumed_real": lambda rank: resumed(rank, 0, stop=1),
    "workers_2_to_0": lambda rank: worker_change(rank, 2, 0, hf=False),
    "workers_0_to_2": lambda rank: worker_change(rank, 0, 2, hf=False),
    "hf_workers_2_to_0": lambda rank: worker_change(rank, 2, 0, hf=True),
    "passed_through": passed_through,
    "fallback": fallback,
    "strided_shortest": strided_shortest,
}


def scenarios(rank: int, world_size: int) -> dict[str, Any]:
    """Every scenario in turn, each reported when it ends (the bound restarts)."""
    # NOTE: a loader without workers that loads a state saved with 2 (`workers_2_to_0`) reads the rest of
    # the epoch with 2 workers, started by the default method, which a rank inherits from the fork server
    # that started it: a fork server of the rank's own then starts them, each importing torch anew (most
    # of this module's time, idle, before this line). A script run as `python train.py` on Linux forks
    # them, as this module's own loaders do (`_loader`).
    torch.multiprocessing.set_start_method("fork", force=True)
    results = {}
    for name, scenario in SCENARIOS.items():
        results[name] = scenario(rank)
        progress(name)
    return results


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return run_distributed(scenarios, 2, timeout=BOUND, daemon=False)


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


@pytest.mark.parametrize("workers", [0, 2])
def test_uneven_shares_pad_by_restarting_the_shorter(results: list[dict[str, Any]], workers: int) -> None:
    first, second = (rank[f"uneven{workers}"] for rank in results)
    assert len(first["pad"]) == len(second["pad"]), "both processes take the same steps"
    assert sorted(_flat(first["pad"])) == list(range(30)), "the longer share is read once, not padded"
    second_ids = _flat(second["pad"])
    real = 10
    assert sorted(second_ids[:real]) == list(range(30, 40))
    assert second_ids[real:] == (second_ids[:real] * 3)[: len(second_ids) - real], (
        "padding restarts the share"
    )
    report = first["pad_report"]
    assert report == second["pad_report"]
    assert report.read == (30, 10) and report.padded == (0, len(second_ids) - real)
    assert report.ended_at[1] is not None and report.ended_at[0] == len(first["pad"])


@pytest.mark.parametrize("workers", [0, 2])
def test_even_batches_false_stops_at_the_shortest_and_counts_the_rest(
    results: list[dict[str, Any]], workers: int
) -> None:
    first, second = (rank[f"uneven{workers}"] for rank in results)
    assert len(first["shortest"]) == len(second["shortest"])
    assert sorted(_flat(second["shortest"])) == list(range(30, 40)), "the shortest share is read to its end"
    seen = len(_flat(first["shortest"])) + len(_flat(second["shortest"]))
    assert first["shortest_report"].unseen == second["shortest_report"].unseen == 40 - seen > 0


@pytest.mark.parametrize("case", ["resumed_padding", "resumed_real"])
def test_resume_continues_each_process_exactly(results: list[dict[str, Any]], case: str) -> None:
    assert results[0][case]["state"] == results[1][case]["state"], "the state is the same on every process"
    for rank in results:
        run = rank[case]
        assert run["head"] + run["tail"] == run["whole"]
    assert results[0][case]["state"]["streams"] == [], "the state holds no process's end"
    if case == "resumed_padding":
        ends = results[0][case]["ends"]
        assert any(end is not None and end < 6 for end in ends), "one process was padding when saved"


def test_datasets_that_split_themselves_are_not_split_again(results: list[dict[str, Any]]) -> None:
    own = [rank["passed_through"][0] for rank in results]
    # Its own split is uneven too (3 and 5 ids): process 0 pads from the start of its part.
    assert own[0] == [[0, 1], [5], [0, 1]] and own[1] == [[2, 3], [4, 6], [7]]
    split = [_flat(rank["passed_through"][1]) for rank in results]
    # `split_dataset_by_node` of 5 shards on 2 nodes keeps every other example on each node.
    assert split[0][:20] == list(range(0, 40, 2)) and split[1][:20] == list(range(1, 40, 2))


def test_strided_fallback_equals_the_reference(results: list[dict[str, Any]]) -> None:
    for rank in results:
        assert rank["fallback"]["ours"] == rank["fallback"]["reference"]


def test_an_empty_share_cannot_be_padded(results: list[dict[str, Any]]) -> None:
    messages = [rank["fallback"]["empty"] for rank in results]
    assert (
        messages[0] == messages[1] and "processes [1]" in messages[0] and "even_batches=False" in messages[0]
    )


def test_strided_even_batches_false_stops_every_process_together(results: list[dict[str, Any]]) -> None:
    # 9 ids in global batches of 4: process 1 has no part of the last one, so both stop after 2 steps.
    assert [rank["strided_shortest"] for rank in results] == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]


@pytest.mark.parametrize("case", ["workers_2_to_0", "workers_0_to_2", "hf_workers_2_to_0"])
def test_a_native_stream_resumed_under_another_worker_count_finishes_the_epoch_exactly(
    results: list[dict[str, Any]], case: str
) -> None:
    """docs/DESIGN.md, "Elastic resume": the rest of the epoch is read with the saved worker count."""
    first, second = (rank[case] for rank in results)
    saved = first["state"]["num_workers"]
    assert first["state"] == second["state"] and first["middle"] == second["middle"]
    assert first["middle"]["num_workers"] == saved, "the bridged epoch records the count it is read with"
    assert first["ends"][1] is not None and first["ends"][1] < 5, (
        "process 1's share had ended (it was padding) when saved"
    )
    assert len(first["warned"]) == 1 and not second["warned"], "rank 0 says it once"
    for rank in results:
        run = rank[case]
        assert run["head"] + run["tail"] == run["whole"]
        assert run["third"] == run["whole"][6:], "a state saved in the bridged epoch continues it too"
        assert run["following"] == run["fresh"], "the next epoch is read with the loader's own count"
    assert first["following"] != first["whole"], "the two worker counts read the share in different orders"


def test_a_stream_runs_ends_go_through_the_restore_not_the_run() -> None:
    """A released state's per-process ends become a restore's (``Position.ended_at``), which the epoch's
    start hands to the run; a state written now holds none (each process finds its own end again)."""
    run = StreamRun(DataKind("shares", stream_ends=PAD), 2, 0)
    saved = [{"ended_at": 3}, {"ended_at": None}]
    assert run.restored_ends(saved) == (3, None), "a 0.2 / 0.3 state's ends are honoured"
    assert run.saved_ends() == [] and run.restored_ends([]) is None, "a new state holds no end"
    assert run.restored_ends(saved[:1]) is None, "another number of processes' ends are no position here"
    assert StreamRun(DataKind("strided", stream_ends=SAME), 2, 0).saved_ends() is None
