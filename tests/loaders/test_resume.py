"""Resumption (docs/DESIGN.md, "Global state", "Elastic resume"): stop anywhere, save, load into a fresh loader, compare the rest.

Cheapest first: one process builds every rank's loader with explicit ``num_processes`` /
``process_index`` (no group is needed for shard mode, nor for dispatch on one process). A loader is
stopped after ``k`` batches of epoch ``e``, its ``state_dict()`` goes through JSON into a loader
built afresh (after the global RNG was seeded differently, so nothing but the state can carry the
order), and what that one yields must be what the uninterrupted run yielded next, in this epoch and
the following one. One launch of three gloo processes covers dispatch (same size, 2 -> 3, 2 -> 1)
and ``state_dict()`` being identical on every process with synchronised generators.

NOTE (documented behaviour, not the reference's): ``skip_first_batches`` and ``skip_batches`` skip
in the current epoch only; the reference's ``skip_first_batches`` loader skips in every epoch.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from lightning_shard import DataLoaderShard, WorkerCountWarning, prepare_data_loader, skip_first_batches
from lightning_shard.loaders.state import STATE_VERSION, LoaderState
from tests.helpers.datasets import IdMap, WorkerSplitIdStream
from tests.helpers.dist import run_distributed
from tests.helpers.loader_cases import FormMap, LoaderCase, indices

EPOCHS = 2
DISPATCH = {"dispatch_batches": True, "put_on_device": True}


def build(case: LoaderCase, num_processes: int, rank: int, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return prepare_data_loader(
        case.user_loader(), num_processes=num_processes, process_index=rank, **case.prepare_kwargs()
    )


def take(loader: Any, limit: int | None = None) -> list[list[int]]:
    """The sample indices of each batch ``iter(loader)`` yields, stopping after ``limit`` batches."""
    out: list[list[int]] = []
    if limit == 0:
        return out
    for batch in loader:
        out.append(indices(batch))
        if limit is not None and len(out) >= limit:
            break
    return out


def stopped(case: LoaderCase, num_processes: int, rank: int, epoch: int, steps: int) -> Any:
    """A loader that ran ``epoch`` full epochs, then ``steps`` batches of the next."""
    loader = build(case, num_processes, rank)
    for _ in range(epoch):
        take(loader)
    take(loader, steps)
    return loader


def through_json(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))


def resumed(case: LoaderCase, num_processes: int, rank: int, state: dict[str, Any]) -> Any:
    loader = build(case, num_processes, rank, seed=12345)
    loader.load_state_dict(through_json(state))
    return loader


# -- Global state: same number of processes ----------------------------------------------------------
SAME_SIZE_CASES = [
    LoaderCase(length=23, batch_size=3, shuffle="global"),
    LoaderCase(length=23, batch_size=3, shuffle="generator", drop_last=True),
    LoaderCase(length=23, batch_size=4, shuffle="generator", options={"split_batches": True}),
    LoaderCase(length=22, batch_size=3, shuffle="seedable", options={"even_batches": False}),
    LoaderCase(length=22, batch_size=4, shuffle="seedable", options={"data_seed": 7, "split_batches": True}),
    LoaderCase(length=19, batch_size=2, batch_sampler_as_sampler=True),
    LoaderCase(length=21, batch_size=3, shuffle="generator", options={"use_stateful_dataloader": True}),
    LoaderCase(iterable=True, length=23, batch_size=3, shuffle="stream"),
    LoaderCase(iterable=True, length=22, batch_size=4, options={"split_batches": True}),
    LoaderCase(iterable=True, length=22, batch_size=3, drop_last=True),
    LoaderCase(length=23, batch_size=3, shuffle="generator", options={"even_batches": "balanced"}),
    LoaderCase(
        length=21,
        batch_size=4,
        shuffle="seedable",
        options={"even_batches": "balanced", "split_batches": True},
    ),
]
DISPATCH_ONE_PROCESS_CASES = [
    LoaderCase(length=23, batch_size=3, shuffle="generator", options=DISPATCH),
    LoaderCase(length=23, batch_size=3, shuffle="seedable", options={**DISPATCH, "split_batches": True}),
    LoaderCase(iterable=True, length=23, batch_size=3, shuffle="stream", options=DISPATCH),
]


def _check_resume_everywhere(case: LoaderCase, num_processes: int) -> None:
    """Every stop point of two epochs, every rank: the resumed loader continues exactly."""
    full = {
        rank: [take(loader) for loader in [build(case, num_processes, rank)] for _ in range(EPOCHS + 1)]
        for rank in range(num_processes)
    }
    for epoch in range(EPOCHS):
        for steps in range(len(full[0][epoch]) + 1):
            states = [
                stopped(case, num_processes, rank, epoch, steps).state_dict() for rank in range(num_processes)
            ]
            assert all(state == states[0] for state in states), f"{case}: state differs across ranks"
            for rank in range(num_processes):
                loader = resumed(case, num_processes, rank, states[0])
                rest = [take(loader) for _ in range(EPOCHS + 1 - epoch)]
                expected = [full[rank][epoch][steps:], *full[rank][epoch + 1 :]]
                assert rest == expected, f"{case}, rank {rank}: resumed at epoch {epoch}, step {steps}"


@pytest.mark.parametrize("case", SAME_SIZE_CASES, ids=str)
def test_resume_continues_exactly_where_it_stopped(case: LoaderCase) -> None:
    _check_resume_everywhere(case, num_processes=2)


@pytest.mark.parametrize("case", DISPATCH_ONE_PROCESS_CASES, ids=str)
def test_dispatch_on_one_process_resumes_exactly(case: LoaderCase) -> None:
    _check_resume_everywhere(case, num_processes=1)


@pytest.mark.parametrize(
    "case",
    [
        LoaderCase(length=29, batch_size=3, shuffle="generator", num_workers=2),
        LoaderCase(iterable=True, length=29, batch_size=3, num_workers=2),
    ],
    ids=str,
)
def test_resume_with_workers(case: LoaderCase) -> None:
    # NOTE: each worker of an iterable dataset reads it whole (torch's rule), so a stream yields its
    # batches twice, interleaved; resuming must still continue that exact sequence.
    full = [take(loader) for loader in [build(case, 2, 1)] for _ in range(2)]
    for steps in (0, 1, len(full[0]) // 2, len(full[0]) - 1):
        loader = resumed(case, 2, 1, stopped(case, 2, 1, 0, steps).state_dict())
        assert [take(loader), take(loader)] == [full[0][steps:], full[1]]


@pytest.mark.parametrize("case", [SAME_SIZE_CASES[1], SAME_SIZE_CASES[3], SAME_SIZE_CASES[7]], ids=str)
def test_set_epoch_during_an_epoch_abandons_it(case: LoaderCase) -> None:
    # NOTE: Lightning stops after `len(loader)` batches without exhausting the iterator, then selects
    # the next epoch; a state saved then must start that epoch, from the generator as it is.
    full = [take(loader) for loader in [build(case, 2, 1)] for _ in range(2)]
    for steps in (len(full[0]), 2):
        loader = stopped(case, 2, 1, 0, steps)
        loader.set_epoch(1)
        state = loader.state_dict()
        assert (state["epoch"], state["steps"]) == (1, 0)
        fresh = resumed(case, 2, 1, state)
        following = [take(loader), take(loader)]
        assert [take(fresh), take(fresh)] == following
        if steps == len(full[0]):
            assert following[0] == full[1]


def test_state_dict_is_plain_versioned_json() -> None:
    for case in [SAME_SIZE_CASES[0], SAME_SIZE_CASES[3], SAME_SIZE_CASES[7], DISPATCH_ONE_PROCESS_CASES[0]]:
        state = stopped(case, 1, 0, 0, 2).state_dict()
        assert through_json(state) == state
        assert state["format"] == "lightning_shard.loader" and state["version"] == STATE_VERSION
        assert state["epoch"] == 0 and state["steps"] == 2 and state["num_processes"] == 1
        assert state["mode"] == ("dispatch" if case.options.get("dispatch_batches") else "shard")


def test_state_at_is_the_state_dict_at_those_steps_before_it_becomes_plain_data() -> None:
    for case in [SAME_SIZE_CASES[0], DISPATCH_ONE_PROCESS_CASES[0]]:
        loader = stopped(case, 1, 0, 0, 3)
        for steps in (0, 1, 3):
            assert loader.state_at(steps).to_dict() == loader.state_dict(steps)
    # NOTE: after a resume onto another number of processes, `consumed` counts the steps taken before it.
    state = stopped(SAME_SIZE_CASES[0], 2, 0, 0, 2).state_dict()
    after = resumed(SAME_SIZE_CASES[0], 1, 0, state)
    consumed = state["consumed"]
    assert after.state_at(2).consumed == consumed and after.state_at(3).consumed == consumed + 1
    with pytest.raises(ValueError, match="below the 2 steps this epoch took before it was resumed"):
        after.state_at(1)


# -- map-style skips never load -----------------------------------------------------------------------
def _dataset(loader: Any) -> FormMap:
    return loader.dataset


def test_resume_loads_only_the_samples_it_yields() -> None:
    for case in (SAME_SIZE_CASES[0], SAME_SIZE_CASES[2], DISPATCH_ONE_PROCESS_CASES[0]):
        num_processes = 1 if case.options.get("dispatch_batches") else 2
        state = stopped(case, num_processes, 0, 0, 3).state_dict()
        loader = resumed(case, num_processes, 0, state)
        yielded = [index for batch in take(loader) for index in batch]
        assert sorted(_dataset(loader).loaded) == sorted(yielded), case


def test_skip_batches_and_skip_first_batches_load_only_what_they_yield() -> None:
    dataset = FormMap(40)
    loader = DataLoaderShard(dataset, batch_size=4, skip_batches=6)
    assert take(loader) == [[24, 25, 26, 27], [28, 29, 30, 31], [32, 33, 34, 35], [36, 37, 38, 39]]
    assert dataset.loaded == list(range(24, 40))
    dataset.loaded.clear()
    assert len(take(skip_first_batches(DataLoader(dataset, batch_size=4, shuffle=True), 8))) == 2
    assert len(dataset.loaded) == 8


# -- skip_first_batches -------------------------------------------------------------------------------
def test_skip_first_batches_keeps_settings_and_skips_the_current_epoch_only() -> None:
    case = LoaderCase(length=30, batch_size=4, drop_last=True, shuffle="generator")
    kwargs = {"put_on_device": True, "device": "cpu", "non_blocking": True, "rng_types": ["generator"]}
    loader = prepare_data_loader(case.user_loader(), num_processes=2, process_index=1, **kwargs)
    twin = prepare_data_loader(case.user_loader(), num_processes=2, process_index=1, **kwargs)
    loader.set_epoch(3)
    twin.set_epoch(3)
    epochs = [take(twin) for _ in range(2)]
    skipped = skip_first_batches(loader, 2)
    assert isinstance(skipped, DataLoaderShard) and skipped is not loader
    assert (skipped.device, skipped.non_blocking, skipped.rng_types) == (
        torch.device("cpu"),
        True,
        ("generator",),
    )
    assert skipped.epoch == 3 and skipped.batch_sampler.drop_last
    assert take(skipped) == epochs[0][2:]
    assert take(skipped) == epochs[1], "the skip applies to the current epoch only"
    assert len(epochs[0]) == 3 and all(len(batch) == 4 for batch in epochs[0])


def test_skip_first_batches_of_a_plain_loader_matches_the_reference() -> None:
    from accelerate.data_loader import skip_first_batches as reference_skip

    for shuffle in (False, True):
        loaders = [
            skip(
                DataLoader(
                    FormMap(23), batch_size=4, shuffle=shuffle, generator=torch.Generator().manual_seed(3)
                ),
                2,
            )
            for skip in (skip_first_batches, reference_skip)
        ]
        assert take(loaders[0]) == take(loaders[1])


# -- Elastic resume: another number of processes (shard mode) ----------------------------------------
ELASTIC_CASES = [
    LoaderCase(length=45, batch_size=3, shuffle="generator"),
    LoaderCase(length=44, batch_size=3, shuffle="seedable", options={"even_batches": False}),
    LoaderCase(length=47, batch_size=6, options={"split_batches": True}),
    LoaderCase(
        length=47, batch_size=6, shuffle="global", options={"split_batches": True, "even_batches": False}
    ),
    LoaderCase(iterable=True, length=45, batch_size=3),
    LoaderCase(iterable=True, length=47, batch_size=6, options={"split_batches": True}),
    LoaderCase(length=46, batch_size=3, shuffle="generator", options={"even_batches": "balanced"}),
    LoaderCase(
        length=47, batch_size=6, shuffle="global", options={"split_batches": True, "even_batches": "balanced"}
    ),
]


def check_exactly_once(
    remaining: set[int], batches_by_rank: list[list[list[int]]], padded: bool, head: list[int]
) -> None:
    """Each remaining sample once; anything else only in a process's last batch, from ``head``."""
    counts = Counter(index for batches in batches_by_rank for batch in batches for index in batch)
    assert set(counts) >= remaining, f"never yielded: {sorted(remaining - set(counts))}"
    last_batches = Counter(index for batches in batches_by_rank if batches for index in batches[-1])
    extra = counts - Counter(remaining)
    if not padded:
        assert not extra, f"duplicates without padding: {dict(extra)}"
    for index, times in extra.items():
        assert times <= last_batches[index] and index in head, f"sample {index} repeated outside the padding"


@pytest.mark.parametrize("case", ELASTIC_CASES, ids=str)
def test_elastic_resume_sees_every_remaining_sample_once(case: LoaderCase) -> None:
    saved_with = 2
    epoch_order = [index for batch in take(build(case, 1, 0)) for index in batch]
    for steps in (0, 1, 3):
        seen = {
            i
            for rank in range(saved_with)
            for batch in take(build(case, saved_with, rank), steps)
            for i in batch
        }
        state = stopped(case, saved_with, 0, 0, steps).state_dict()
        for new_size in (1, 3):
            if case.options.get("split_batches") and case.batch_size % new_size:
                continue
            loaders = [resumed(case, new_size, rank, state) for rank in range(new_size)]
            batches = [take(loader) for loader in loaders]
            even = case.options.get("even_batches", True)
            padded = even is True and new_size > 1
            check_exactly_once(set(range(case.length)) - seen, batches, padded, epoch_order)
            if even:
                assert len({len(b) for b in batches}) == 1, "even_batches: equal batch counts"
            # The next epoch is the new size's ordinary next epoch.
            following = [take(loader) for loader in loaders]
            after = stopped(case, saved_with, 0, 1, 0).state_dict()
            assert following == [take(resumed(case, new_size, rank, after)) for rank in range(new_size)]


def test_elastic_resume_refuses_split_batches_the_new_size_cannot_divide() -> None:
    case = LoaderCase(length=40, batch_size=4, options={"split_batches": True})
    state = stopped(case, 2, 0, 0, 2).state_dict()
    with pytest.raises(ValueError, match=r"batch size \(4\).*number of processes \(3\)"):
        resumed(case, 3, 0, state)


def _one_sample_loaders(num_processes: int, seed: int = 0) -> list[Any]:
    """Each rank's loader over a user loader of its own (each process has its own generator)."""
    torch.manual_seed(seed)
    return [
        prepare_data_loader(
            DataLoader(IdMap(23), batch_size=None, shuffle=True, generator=torch.Generator().manual_seed(5)),
            num_processes=num_processes,
            process_index=rank,
        )
        for rank in range(num_processes)
    ]


def test_a_loader_of_single_samples_shards_and_resumes_by_sample() -> None:
    full = [list(loader) for loader in _one_sample_loaders(2)]
    assert all(isinstance(sample, int) for samples in full for sample in samples), "uncollated samples"
    assert len(full[0]) == len(full[1]) == 12, "23 samples on 2 processes: the last step padded"
    assert set(full[0]) | set(full[1]) == set(range(23)) and not set(full[0][:11]) & set(full[1][:11])
    stopped = _one_sample_loaders(2)
    for loader in stopped:
        iterator = iter(loader)
        for _ in range(5):
            next(iterator)
    state = through_json(stopped[0].state_dict())
    for rank, loader in enumerate(_one_sample_loaders(2, seed=7)):
        loader.load_state_dict(state)
        assert list(loader) == full[rank][5:]
    single = _one_sample_loaders(1, seed=7)[0]
    single.load_state_dict(state)
    seen = {sample for samples in full for sample in samples[:5]}
    assert sorted(single) == sorted(set(range(23)) - seen)


# -- bad state ----------------------------------------------------------------------------------------
def _state(**changes: Any) -> dict[str, Any]:
    case = LoaderCase(length=20, batch_size=4)
    return {**stopped(case, 2, 0, 0, 1).state_dict(), **changes}


@pytest.mark.parametrize(
    ("other", "state", "match"),
    [
        (LoaderCase(length=21, batch_size=4), _state(), r"dataset_length=20.*dataset_length=21"),
        (LoaderCase(length=20, batch_size=5), _state(), r"batch_size=4.*batch_size=5"),
        (LoaderCase(length=20, batch_size=4, drop_last=True), _state(), r"drop_last=False.*drop_last=True"),
        (
            LoaderCase(length=20, batch_size=4, options={"split_batches": True}),
            _state(),
            "split_batches=False",
        ),
        (LoaderCase(length=20, batch_size=4, options=DISPATCH), _state(), "dispatch_batches=False"),
        (
            LoaderCase(length=20, batch_size=4, shuffle="generator"),
            _state(),
            r"`sampler='SequentialSampler'`.*`sampler='RandomSampler'`",
        ),
        (LoaderCase(length=20, batch_size=4), _state(version=STATE_VERSION + 1), "version 3"),
        (
            LoaderCase(length=20, batch_size=4),
            _state(format="torchdata"),
            "not a lightning_shard loader state",
        ),
        (
            LoaderCase(length=20, batch_size=4),
            {k: v for k, v in _state().items() if k != "consumed"},
            "missing",
        ),
        (LoaderCase(length=20, batch_size=4), _state(steps=-1), "steps"),
    ],
)
def test_bad_state_is_refused_with_a_clear_message(
    other: LoaderCase, state: dict[str, Any], match: str
) -> None:
    loader = build(other, 1 if other.options.get("dispatch_batches") else 2, 0)
    with pytest.raises(ValueError, match=match):
        loader.load_state_dict(state)


def test_the_version_is_checked_before_any_incompatibility() -> None:
    loader = build(LoaderCase(length=21, batch_size=5), 2, 0)
    with pytest.raises(ValueError, match="version 3"):
        loader.load_state_dict(_state(version=STATE_VERSION + 1))


def test_a_state_parses_and_writes_back_the_same_flat_dict() -> None:
    for case in [SAME_SIZE_CASES[0], SAME_SIZE_CASES[3], DISPATCH_ONE_PROCESS_CASES[0]]:
        state = stopped(case, 1, 0, 0, 2).state_dict()
        again = LoaderState.from_dict(state).to_dict()
        assert again == state and list(again) == list(state)
        # NOTE: the keys come from the fields of `ShardingInfo`, `Position` and `LoaderState`; these are the
        # format's (version 2), so a new field of theirs must not change it unnoticed.
        assert set(state) == {
            *("format", "version", "mode", "num_processes", "split_batches", "even_batches", "drop_last"),
            *("batch_size", "dataset_length", "sampler", "epoch", "steps", "base", "base_steps"),
            *("generator_state", "sampler_seed", "num_workers", "consumed", "world_size", "streams"),
        }


def test_a_version_1_state_loads_and_is_the_pending_position() -> None:
    case = LoaderCase(length=20, batch_size=4)
    version_2 = _state()
    optional = (
        "generator_state",
        "sampler_seed",
        "base_steps",
        "world_size",
        "num_workers",
        "sampler",
        "streams",
    )
    version_1 = {key: value for key, value in version_2.items() if key not in optional} | {"version": 1}
    loader = build(case, 2, 0)
    assert loader.pending_position is None
    loader.load_state_dict(version_1)
    pending = loader.pending_position
    assert pending is not None and (pending.epoch, pending.steps, pending.read_before_resume) == (0, 1, 0)
    assert take(loader) == take(resumed(case, 2, 0, version_2))
    assert loader.pending_position is None


def test_a_non_dict_state_is_refused() -> None:
    loader = build(LoaderCase(), 1, 0)
    with pytest.raises(ValueError, match="not a lightning_shard loader state"):
        loader.load_state_dict([1, 2])  # type: ignore[arg-type]


# -- real groups: dispatch, and state identical everywhere -------------------------------------------
def _dispatch_same_size(rank: int, size: int, case: LoaderCase, group: Any) -> list[str]:
    """On ranks ``< size`` (``group``): every stop point, resumed with ``size`` processes again."""
    failures = []
    full = take(build(case, size, rank))
    for steps in range(len(full) + 1):
        state = stopped(case, size, rank, 0, steps).state_dict()
        states: list[Any] = [None] * size
        dist.all_gather_object(states, state, group=group)
        if any(other != state for other in states):
            failures.append(f"{case}: dispatch state differs across ranks at step {steps}")
        if take(resumed(case, size, rank, state)) != full[steps:]:
            failures.append(f"{case} on {size}, rank {rank}: resumed at step {steps}")
    return failures


def _dispatch_elastic(rank: int, case: LoaderCase, steps: int) -> dict[str, Any]:
    """Saved by 2 processes (ranks 0, 1) after ``steps``; loaded on 3 (all ranks) and on 1 (rank 0)."""
    seen: list[list[int]] = []
    box: list[Any] = [None]
    if rank < 2:
        box = [stopped(case, 2, rank, 0, steps).state_dict()]
        seen = take(build(case, 2, rank), steps)
    dist.broadcast_object_list(box, src=0)
    on_three = take(resumed(case, 3, rank, box[0]))
    on_one = take(resumed(case, 1, 0, box[0])) if rank == 0 else None
    return {"seen": seen, "three": on_three, "one": on_one}


def _shard_state_everywhere(rank: int, case: LoaderCase) -> list[str]:
    """Each rank seeds its RNG differently; the generator is synchronised, so states agree."""
    failures = []
    world = dist.get_world_size()
    full = take(build(case, world, rank, seed=rank))
    for steps in (1, len(full) // 2, len(full)):
        loader = build(case, world, rank, seed=rank)
        take(loader, steps)
        states: list[Any] = [None] * world
        dist.all_gather_object(states, loader.state_dict())
        if any(state != states[0] for state in states):
            failures.append(f"{case}: state differs across ranks at step {steps}")
        fresh = build(case, world, rank, seed=100 + rank)
        fresh.load_state_dict(through_json(states[0]))
        if take(fresh) != full[steps:]:
            failures.append(f"{case}, rank {rank}: resumed at step {steps}")
    return failures


def run_dist_resume(rank: int, world_size: int) -> dict[str, Any]:
    failures: list[str] = []
    pair = dist.new_group([0, 1])
    for size, case in [
        (3, LoaderCase(length=10, batch_size=1, shuffle="generator", options=DISPATCH)),
        (3, LoaderCase(length=11, batch_size=2, drop_last=True, options=DISPATCH)),
        (
            2,
            LoaderCase(
                length=13, batch_size=2, shuffle="seedable", options={**DISPATCH, "split_batches": True}
            ),
        ),
        (2, LoaderCase(iterable=True, length=13, batch_size=3, shuffle="stream", options=DISPATCH)),
    ]:
        if rank < size:
            failures += _dispatch_same_size(rank, size, case, pair if size == 2 else None)
        dist.barrier()
    elastic = {
        (name, steps): _dispatch_elastic(rank, case, steps)
        for name, case in ELASTIC_DISPATCH_CASES.items()
        for steps in (1, 2)
    }
    shard = LoaderCase(
        length=31, batch_size=3, shuffle="global", seed_per_rank=True, options={"rng_types": ["generator"]}
    )
    failures += _shard_state_everywhere(rank, shard)
    return {"failures": failures, "elastic": elastic}


ELASTIC_DISPATCH_CASES = {
    "map shuffled": LoaderCase(length=17, batch_size=2, shuffle="generator", options=DISPATCH),
    "map split": LoaderCase(length=17, batch_size=6, options={**DISPATCH, "split_batches": True}),
    "iterable": LoaderCase(iterable=True, length=17, batch_size=1, options=DISPATCH),
}


@pytest.mark.dist
def test_dispatch_and_synchronised_state_on_real_groups() -> None:
    results = run_distributed(run_dist_resume, 3, timeout=120)
    failures = [failure for result in results for failure in result["failures"]]
    assert not failures, "\n".join(failures[:8])
    for (name, steps), _ in results[0]["elastic"].items():
        case = ELASTIC_DISPATCH_CASES[name]
        seen = {
            i for result in results[:2] for batch in result["elastic"][(name, steps)]["seen"] for i in batch
        }
        remaining = set(range(case.length)) - seen
        epoch_order = [index for batch in take(build(case, 1, 0)) for index in batch]
        on_three = [result["elastic"][(name, steps)]["three"] for result in results]
        check_exactly_once(remaining, on_three, padded=True, head=epoch_order)
        assert len({len(batches) for batches in on_three}) == 1
        on_one = results[0]["elastic"][(name, steps)]["one"]
        check_exactly_once(remaining, [on_one], padded=False, head=epoch_order)


def _worker_split(workers: int, rank: int, dispatch: bool = False) -> Any:
    """29 ids split among the workers by the dataset itself, strided over 2 processes (or dispatched)."""
    data = DataLoader(
        WorkerSplitIdStream(29),
        batch_size=3,
        num_workers=workers,
        multiprocessing_context="fork" if workers else None,
    )
    if dispatch:
        return prepare_data_loader(data, num_processes=1, process_index=0, **DISPATCH)
    return prepare_data_loader(data, num_processes=2, process_index=rank)


@pytest.mark.parametrize(("saved", "resumed"), [(2, 0), (0, 2), (2, 3)])
@pytest.mark.parametrize("dispatch", [False, True])
def test_a_stream_epoch_resumed_under_another_worker_count_finishes_exactly(
    saved: int, resumed: int, dispatch: bool
) -> None:
    """docs/DESIGN.md, "Elastic resume": the rest of the epoch is read with the saved worker count (the
    only exact continuation: which ids each worker reads depends on their number), the new count applies
    from the next epoch, and a state saved in the bridged epoch records the saved count."""
    for rank in range(1 if dispatch else 2):
        whole = take(_worker_split(saved, rank, dispatch))
        stop = 2
        first = _worker_split(saved, rank, dispatch)
        head = take(first, stop)
        state = json.loads(json.dumps(first.state_dict()))
        again = _worker_split(resumed, rank, dispatch)
        with pytest.warns(WorkerCountWarning, match=rf"rest of epoch 0 is read with {saved} workers"):
            again.load_state_dict(state)
        batches = iter(again)
        step = indices(next(batches))
        middle = again.state_dict()
        tail = [step] + [indices(batch) for batch in batches]
        assert head + tail == whole, (
            f"rank {rank}: the epoch continues as it would have under {saved} workers"
        )
        assert middle["num_workers"] == saved and middle["steps"] == stop + 1
        following = take(again)
        fresh = _worker_split(resumed, rank, dispatch)
        take(fresh)
        assert following == take(fresh), "the next epoch is read with the loader's own worker count"
        assert following != whole, "the two worker counts read the stream in different orders"
        third = _worker_split(resumed, rank, dispatch)
        with pytest.warns(WorkerCountWarning, match="rest of epoch 0"):
            third.load_state_dict(middle)
        assert take(third) == whole[stop + 1 :], "a state saved in the bridged epoch continues it too"


def test_a_stream_state_saved_between_epochs_loads_with_any_worker_count() -> None:
    case = LoaderCase(iterable=True, length=30, batch_size=3)
    between = stopped(case, 2, 0, 1, 0).state_dict()
    loader = build(LoaderCase(iterable=True, length=30, batch_size=3, num_workers=2), 2, 0)
    loader.load_state_dict(between)
    assert loader.epoch == 1 and loader.state_dict()["num_workers"] == 2


def test_a_stream_position_is_refused_by_a_map_style_loader_mid_epoch_only() -> None:
    stream, indexed = LoaderCase(iterable=True, length=30, batch_size=3), LoaderCase(length=30, batch_size=3)
    with pytest.raises(
        ValueError, match=r"`sampler='iterable'`, but this loader has `sampler='SequentialSampler'`"
    ):
        build(indexed, 2, 0).load_state_dict(stopped(stream, 2, 0, 0, 2).state_dict())
    with pytest.raises(
        ValueError, match=r"`sampler='SequentialSampler'`, but this loader has `sampler='iterable'`"
    ):
        build(stream, 2, 0).load_state_dict(stopped(indexed, 2, 0, 0, 2).state_dict())
    loader = build(indexed, 2, 0)
    loader.load_state_dict(stopped(stream, 2, 0, 1, 0).state_dict())
    assert take(loader) == take(build(indexed, 2, 0)), "between epochs the next epoch starts afresh"


@pytest.mark.parametrize("processes", [1, 3])
def test_the_batch_sampler_is_a_whole_epoch_again_after_a_resumed_epoch(processes: int) -> None:
    """0.4.0 left the resume's start on the loader's batch sampler: after an epoch resumed from 2 processes
    onto 1, ``len(loader.batch_sampler)`` was 4 and iterating it yielded 4 batches of indices (a fresh
    loader's: 10), which anything sized from the batch sampler saw."""
    saved = prepare_data_loader(DataLoader(IdMap(40), batch_size=4), num_processes=2, process_index=0)
    batches = iter(saved)
    for _ in range(3):
        next(batches)
    state = json.loads(json.dumps(saved.state_dict()))
    fresh = prepare_data_loader(DataLoader(IdMap(40), batch_size=4), num_processes=processes, process_index=0)
    whole = len(fresh.batch_sampler)
    resumed = prepare_data_loader(
        DataLoader(IdMap(40), batch_size=4), num_processes=processes, process_index=0
    )
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert 0 < len(rest) < whole
    resumed.set_epoch(1)
    assert len(resumed.batch_sampler) == whole == len(list(resumed.batch_sampler))
    assert len(list(resumed)) == len(resumed) == whole
