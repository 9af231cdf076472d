"""``scalable_shuffle`` resumes as a position (docs/DESIGN.md, "Scale", "Elastic resume"): stopped anywhere,
its state loaded into a fresh loader continues exactly, also on another number of processes or workers
and under dispatch; first one process playing every rank (the helpers of ``test_resume.py``), then a
real 2-process gloo group."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from lightning_shard.sampling.permutation import KeyedPermutation
from tests.helpers.dist import run_distributed
from tests.helpers.loader_cases import LoaderCase
from tests.loaders import test_resume as resume
from tests.loaders.test_resume import DISPATCH, build, resumed, stopped, take

SCALABLE = {"scalable_shuffle": True, "data_seed": 4}
SAME_SIZE = [
    LoaderCase(length=23, batch_size=3, shuffle="global", options=SCALABLE),
    LoaderCase(length=23, batch_size=4, shuffle="global", options={**SCALABLE, "split_batches": True}),
    LoaderCase(length=22, batch_size=3, shuffle="global", options={**SCALABLE, "even_batches": False}),
    LoaderCase(length=22, batch_size=3, shuffle="global", drop_last=True, options=SCALABLE),
    LoaderCase(length=23, batch_size=3, shuffle="global", options={**SCALABLE, "even_batches": "balanced"}),
]


@pytest.mark.parametrize("case", SAME_SIZE, ids=str)
def test_resume_continues_exactly_where_it_stopped(case: LoaderCase) -> None:
    resume._check_resume_everywhere(case, num_processes=2)


def test_dispatch_on_one_process_resumes_exactly() -> None:
    resume._check_resume_everywhere(
        LoaderCase(length=23, batch_size=3, shuffle="global", options={**SCALABLE, **DISPATCH}),
        num_processes=1,
    )


@pytest.mark.parametrize(
    "case",
    [
        LoaderCase(length=47, batch_size=3, shuffle="global", options=SCALABLE),
        LoaderCase(length=44, batch_size=3, shuffle="global", options={**SCALABLE, "even_batches": False}),
        LoaderCase(length=47, batch_size=6, shuffle="global", options={**SCALABLE, "split_batches": True}),
        LoaderCase(
            length=46, batch_size=3, shuffle="global", options={**SCALABLE, "even_batches": "balanced"}
        ),
    ],
    ids=str,
)
def test_elastic_resume_sees_every_remaining_sample_once(case: LoaderCase) -> None:
    resume.test_elastic_resume_sees_every_remaining_sample_once(case)


def test_elastic_resume_continues_the_same_order() -> None:
    """Saved by 2 processes after 3 steps, resumed on 1 and 3: the rest of one order, nothing drawn anew."""
    case = LoaderCase(length=44, batch_size=2, shuffle="global", options={**SCALABLE, "even_batches": False})
    whole = KeyedPermutation(44, 4, 0).at(torch.arange(44)).tolist()
    state = stopped(case, 2, 0, 0, 3).state_dict()
    for new_size in (1, 3):
        batches = [take(resumed(case, new_size, rank, state)) for rank in range(new_size)]
        steps = max(len(shard) for shard in batches)
        rest = [
            index for step in range(steps) for shard in batches if step < len(shard) for index in shard[step]
        ]
        assert rest == whole[2 * 2 * 3 :], f"resumed on {new_size}"


def test_resume_under_another_number_of_workers() -> None:
    saved_case = LoaderCase(length=29, batch_size=3, shuffle="global", num_workers=2, options=SCALABLE)
    loaded_case = LoaderCase(length=29, batch_size=3, shuffle="global", num_workers=0, options=SCALABLE)
    full = [take(loader) for loader in [build(saved_case, 2, 1)] for _ in range(2)]
    for steps in (1, len(full[0]) // 2):
        loader = resumed(loaded_case, 2, 1, stopped(saved_case, 2, 1, 0, steps).state_dict())
        assert [take(loader), take(loader)] == [full[0][steps:], full[1]]


def test_a_mid_epoch_state_of_another_shuffle_is_refused() -> None:
    plain = LoaderCase(length=23, batch_size=3, shuffle="global")
    scalable = LoaderCase(length=23, batch_size=3, shuffle="global", options=SCALABLE)
    for saved, loaded in ((plain, scalable), (scalable, plain)):
        with pytest.raises(
            ValueError,
            match=r"`scalable_shuffle=(True|False)`.*`scalable_shuffle=(True|False)`.*built the same way",
        ):
            resumed(loaded, 2, 0, stopped(saved, 2, 0, 0, 2).state_dict())
    assert take(resumed(scalable, 2, 0, stopped(plain, 2, 0, 1, 0).state_dict())), "between epochs it loads"


# -- a real group -------------------------------------------------------------------------------------
def _run(rank: int, world_size: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, options in [("shard", SCALABLE), ("dispatch", {**SCALABLE, **DISPATCH})]:
        case = LoaderCase(length=25, batch_size=3, shuffle="global", seed_per_rank=True, options=options)
        full = [take(loader) for loader in [build(case, world_size, rank, seed=rank)] for _ in range(2)]
        loader = build(case, world_size, rank, seed=rank)
        take(loader, 2)
        states: list[Any] = [None] * world_size
        dist.all_gather_object(states, loader.state_dict())
        fresh = build(case, world_size, rank, seed=50 + rank)
        fresh.load_state_dict(resume.through_json(states[0]))
        results[name] = {
            "full": full,
            "resumed": [take(fresh), take(fresh)],
            "states_agree": all(state == states[0] for state in states),
        }
    return results


@pytest.mark.dist
def test_two_gloo_processes_share_the_order_and_resume_exactly() -> None:
    ranks = run_distributed(_run, 2, timeout=120)
    for name in ("shard", "dispatch"):
        for rank, result in enumerate(ranks):
            full, rest = result[name]["full"], result[name]["resumed"]
            assert result[name]["states_agree"], f"{name}: every process saves the same state"
            assert rest == [full[0][2:], full[1]], f"{name}, rank {rank}: the resumed run continues exactly"
        for epoch in range(2):
            whole = KeyedPermutation(25, 4, epoch).at(torch.arange(25)).tolist()
            shards = [result[name]["full"][epoch] for result in ranks]
            seen = [index for step in zip(*shards, strict=True) for batch in step for index in batch]
            assert seen[:25] == whole, f"{name}, epoch {epoch}: both processes read one keyed order"
