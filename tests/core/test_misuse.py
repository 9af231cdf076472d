"""Every misuse is refused at construction or setup (docs/DESIGN.md, "Bad input"), never at the first batch or by a
hang, with a ``ValueError`` / ``TypeError`` whose message names the parameter (in backticks), the value
received and the fix.

Each row builds the misuse and nothing more: no row iterates a loader, so an error that only surfaced
at the first batch would fail its row. The one misuse that is by nature found at the first batch
(dispatched batches that cannot be concatenated) is checked in a 2-process run at the end.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    SequentialSampler,
)

from lightning_shard import (
    BatchSamplerShard,
    DataLoaderShard,
    IterableDatasetShard,
    SeedableRandomSampler,
    ShardOptimizer,
    ShardOptions,
    ShardScheduler,
    SkipBatchSampler,
    prepare_data_loader,
    skip_first_batches,
)
from tests.helpers.datasets import IdMap, IdStream
from tests.helpers.dist import run_distributed


class UnsizedBatches:
    """A custom batch sampler with no ``batch_size`` attribute (batch sizes vary)."""

    def __iter__(self) -> Any:
        return iter([[0, 1, 2], [3], [4, 5]])

    def __len__(self) -> int:
        return 3


def loader(length: int = 20, batch_size: int = 4, **kwargs: Any) -> DataLoader:
    return DataLoader(IdMap(length), batch_size=batch_size, **kwargs)


def prepared(length: int = 20, batch_size: int = 4, **kwargs: Any) -> Any:
    options = {"num_processes": 2, "process_index": 0, **kwargs}
    return prepare_data_loader(loader(length, batch_size), **options)


def saved_state(**kwargs: Any) -> dict[str, Any]:
    """The state of a prepared loader after one batch."""
    source = prepared(**kwargs)
    iterator = iter(source)
    next(iterator)
    return source.state_dict()


def without(state: dict[str, Any], key: str) -> dict[str, Any]:
    return {name: value for name, value in state.items() if name != key}


def model_parts() -> tuple[torch.optim.Optimizer, Any]:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)


def batches(batch_size: int = 4) -> BatchSampler:
    return BatchSampler(SequentialSampler(range(20)), batch_size=batch_size, drop_last=False)


Row = tuple[str, Callable[[], Any], type[Exception], list[str]]
# (id, build the misuse, expected exception, regexes that must all appear: parameter, value, fix)
ROWS: list[Row] = [
    (
        "split-batches-not-a-multiple",
        lambda: prepare_data_loader(
            loader(batch_size=10), num_processes=4, process_index=0, split_batches=True
        ),
        ValueError,
        [
            r"`split_batches=True`",
            r"batch size \(10\)",
            r"processes \(4\)",
            r"8 or 12, or set `split_batches=False`",
        ],
    ),
    (
        "split-batches-without-a-batch-size",
        lambda: prepare_data_loader(
            DataLoader(IdMap(6), batch_sampler=UnsizedBatches()), num_processes=2, split_batches=True
        ),
        ValueError,
        [
            r"`split_batches=True`",
            r"`batch_size=None`",
            r"batch sampler with a `batch_size`",
            r"`split_batches=False`",
        ],
    ),
    (
        "dispatch-without-put-on-device",
        lambda: prepare_data_loader(loader(), dispatch_batches=True),
        ValueError,
        [
            r"`dispatch_batches=True`",
            r"`put_on_device=True`",
            r"Set `put_on_device=True`, or `dispatch_batches=False`",
        ],
    ),
    (
        "dispatch-over-several-processes-without-a-group",
        lambda: prepare_data_loader(
            loader(), num_processes=2, process_index=0, dispatch_batches=True, put_on_device=True
        ),
        ValueError,
        [
            r"`dispatch_batches=True`",
            r"`num_processes=2`",
            r"init_process_group",
            r"`dispatch_batches=False`",
        ],
    ),
    (
        "num-processes-zero",
        lambda: prepare_data_loader(loader(), num_processes=0),
        ValueError,
        [r"`num_processes`", r"got 0\b", r"e\.g\. `num_processes=2`"],
    ),
    (
        "num-processes-negative",
        lambda: BatchSamplerShard(batches(), num_processes=-1),
        ValueError,
        [r"`num_processes`", r"got -1\b", r"e\.g\. `num_processes=2`"],
    ),
    (
        "num-processes-not-an-int",
        lambda: prepare_data_loader(loader(), num_processes=2.0, process_index=0),
        TypeError,
        [r"`num_processes`", r"got 2\.0 \(float\)", r"`num_processes=2`"],
    ),
    (
        "process-index-too-large",
        lambda: prepare_data_loader(loader(), num_processes=2, process_index=2),
        ValueError,
        [r"`process_index`", r"got 2\b", r"between 0 and 1"],
    ),
    (
        "process-index-negative",
        lambda: IterableDatasetShard(IdStream(8), num_processes=3, process_index=-1),
        ValueError,
        [r"`process_index`", r"got -1\b", r"between 0 and 2"],
    ),
    (
        "unknown-rng-type",
        lambda: prepare_data_loader(loader(), rng_types=["numpy"]),
        ValueError,
        [r"`rng_types`", r"'numpy'", r"Use any of \['torch', 'cuda', 'generator'\]"],
    ),
    (
        "unknown-rng-type-on-the-loader",
        lambda: DataLoaderShard(IdMap(8), rng_types=["python"]),
        ValueError,
        [r"`rng_types`", r"'python'", r"Use any of"],
    ),
    (
        "generator-rng-type-without-a-generator",
        lambda: DataLoaderShard(IdMap(8), rng_types=["generator"], synchronized_generator=None),
        ValueError,
        [r"`rng_types`", r"'generator'", r"no generator", r"remove 'generator' from `rng_types`"],
    ),
    (
        "negative-skip-batches-on-the-loader",
        lambda: DataLoaderShard(IdMap(8), batch_size=2, skip_batches=-1),
        ValueError,
        [r"`skip_batches`", r"got -1\b", r"Pass 0 to skip nothing"],
    ),
    (
        "negative-skip-batches-on-the-sampler",
        lambda: SkipBatchSampler(batches(), skip_batches=-3),
        ValueError,
        [r"`skip_batches`", r"got -3\b", r"Pass 0 to skip nothing"],
    ),
    (
        "negative-skip-first-batches",
        lambda: skip_first_batches(loader(), num_batches=-2),
        ValueError,
        [r"`num_batches`", r"got -2\b", r"Pass 0 to skip nothing"],
    ),
    (
        "non-integer-skip-first-batches",
        lambda: skip_first_batches(prepared(), num_batches=1.5),
        TypeError,
        [r"`num_batches`", r"got 1\.5 \(float\)", r"e\.g\. `num_batches=0`"],
    ),
    (
        "non-integer-data-seed",
        lambda: prepare_data_loader(loader(shuffle=True), use_seedable_sampler=True, data_seed=1.5),
        TypeError,
        [r"`data_seed`", r"got 1\.5 \(float\)", r"`data_seed=1234`"],
    ),
    (
        "string-data-seed-on-the-sampler",
        lambda: SeedableRandomSampler(IdMap(8), data_seed="7"),
        TypeError,
        [r"`data_seed`", r"got '7' \(str\)", r"`data_seed=1234`"],
    ),
    (
        "flag-that-is-not-a-bool",
        lambda: prepare_data_loader(loader(), split_batches="false"),
        TypeError,
        [r"`split_batches`", r"got 'false' \(str\)", r"`split_batches=True` or `split_batches=False`"],
    ),
    (
        "slice-fn-not-callable",
        lambda: ShardOptions(dispatch_batches=True, put_on_device=True, slice_fn_for_dispatch="rows"),
        TypeError,
        [r"`slice_fn_for_dispatch`", r"'rows'", r"Pass a function", r"or None"],
    ),
    (
        "distributed-sampler",
        lambda: prepare_data_loader(
            loader(sampler=DistributedSampler(IdMap(20), num_replicas=2, rank=0)), num_processes=2
        ),
        ValueError,
        [
            r"`dataloader`",
            r"DistributedSampler",
            r"`Trainer\(use_distributed_sampler=False\)`",
            r"plain sampler",
        ],
    ),
    (
        "not-a-dataloader",
        lambda: prepare_data_loader(IdMap(20)),
        TypeError,
        [r"`dataloader`", r"got IdMap", r"`DataLoader\(dataset, batch_size=\.\.\.\)`"],
    ),
    (
        "already-prepared",
        lambda: prepare_data_loader(prepared()),
        ValueError,
        [r"`dataloader`", r"already prepared \(DataLoaderShard\)", r"Pass the original `DataLoader`"],
    ),
    (
        "built-on-a-batch-sampler-shard",
        lambda: prepare_data_loader(
            DataLoader(IdMap(20), batch_sampler=BatchSamplerShard(batches(), num_processes=2)),
            num_processes=2,
        ),
        ValueError,
        [r"`dataloader`", r"BatchSamplerShard with `num_processes=2`", r"plain dataset and batch sampler"],
    ),
    (
        "built-on-an-iterable-dataset-shard",
        lambda: prepare_data_loader(
            DataLoader(IterableDatasetShard(IdStream(8), num_processes=2), batch_size=2), num_processes=2
        ),
        ValueError,
        [r"`dataloader`", r"IterableDatasetShard with `num_processes=2`", r"plain dataset"],
    ),
    (
        "state-from-another-dataset-length",
        lambda: prepared(length=21).load_state_dict(saved_state()),
        ValueError,
        [r"`state_dict`", r"`dataset_length=20`", r"`dataset_length=21`", r"built the same way"],
    ),
    (
        "state-from-another-batch-size",
        lambda: prepared(batch_size=5).load_state_dict(saved_state()),
        ValueError,
        [r"`state_dict`", r"`batch_size=4`", r"`batch_size=5`", r"built the same way"],
    ),
    (
        "state-from-another-split-batches",
        lambda: prepared().load_state_dict(saved_state(split_batches=True)),
        ValueError,
        [r"`state_dict`", r"`split_batches=True`", r"`split_batches=False`", r"built the same way"],
    ),
    (
        "state-from-dispatch-into-shard",
        lambda: prepared().load_state_dict({**saved_state(), "mode": "dispatch"}),
        ValueError,
        [r"`state_dict`", r"`dispatch_batches=True`", r"`dispatch_batches=False`", r"built the same way"],
    ),
    (
        "state-of-an-unknown-version",
        lambda: prepared().load_state_dict({**saved_state(), "version": 99}),
        ValueError,
        [r"`state_dict`", r"version 99", r"release that wrote it"],
    ),
    (
        "truncated-state",
        lambda: prepared().load_state_dict(without(saved_state(), "consumed")),
        ValueError,
        [r"`state_dict`", r"missing the keys \['consumed'\]", r"Pass the complete dict"],
    ),
    (
        "edited-state",
        lambda: prepared().load_state_dict({**saved_state(), "steps": -4}),
        ValueError,
        [r"`state_dict\['steps'\]`", r"is -4\b", r"unchanged"],
    ),
    (
        "state-that-is-not-a-dict",
        lambda: prepared().load_state_dict([("epoch", 0)]),
        ValueError,
        [r"`state_dict`", r"got list", r"Pass the dict returned by the loader's `state_dict\(\)`"],
    ),
    (
        "state-that-is-another-dict",
        lambda: prepared().load_state_dict({"epoch": 0, "steps": 3}),
        ValueError,
        [r"`state_dict`", r"keys \['epoch', 'steps'\]", r"Pass the dict returned"],
    ),
    (
        # NOTE: a split_batches state can only be loaded into a loader with a batch size that the new
        # number of processes divides; preparing that loader is what refuses it, before any load.
        "split-batches-state-on-a-number-of-processes-that-does-not-divide-the-batch",
        lambda: prepared(split_batches=True, num_processes=3).load_state_dict(
            saved_state(split_batches=True)
        ),
        ValueError,
        [r"`split_batches=True`", r"batch size \(4\)", r"processes \(3\)", r"a batch size of 3 or 6"],
    ),
    (
        "unknown-option-in-replace",
        lambda: ShardOptions().replace(split_batch=True),
        TypeError,
        [r"`ShardOptions\.replace`", r"\['split_batch'\]", r"Did you mean `split_batches`\?"],
    ),
    (
        "option-replaced-by-a-misuse",
        lambda: ShardOptions().replace(dispatch_batches=True),
        ValueError,
        [r"`dispatch_batches=True`", r"`put_on_device=True`", r"Set `put_on_device=True`"],
    ),
    (
        "optimizer-that-is-not-one",
        lambda: ShardOptimizer(torch.nn.Linear(2, 1)),
        TypeError,
        [r"`optimizer`", r"got Linear", r"Pass the optimizer itself"],
    ),
    (
        "optimizer-scaler-that-is-not-one",
        lambda: ShardOptimizer(model_parts()[0], scaler=2.0),
        TypeError,
        [r"`scaler`", r"got float", r"`scaler=None`"],
    ),
    (
        "optimizer-device-placement-not-a-bool",
        lambda: ShardOptimizer(model_parts()[0], device_placement="yes"),
        TypeError,
        [r"`device_placement`", r"got 'yes' \(str\)", r"`device_placement=True` or `device_placement=False`"],
    ),
    (
        "scheduler-that-is-not-one",
        lambda: ShardScheduler(model_parts()[0], model_parts()[0]),
        TypeError,
        [r"`scheduler`", r"got the optimizer SGD", r"Pass `ShardScheduler\(scheduler, optimizers\)`"],
    ),
    (
        "scheduler-following-a-non-optimizer",
        lambda: ShardScheduler(model_parts()[1], [torch.nn.Linear(2, 1)]),
        TypeError,
        [r"`optimizers`", r"type Linear", r"Pass the optimizer\(s\)"],
    ),
    (
        "scheduler-num-processes-zero",
        lambda: ShardScheduler(model_parts()[1], model_parts()[0], num_processes=0),
        ValueError,
        [r"`num_processes`", r"got 0\b", r"e\.g\. `num_processes=2`"],
    ),
    (
        "scheduler-split-batches-not-a-bool",
        lambda: ShardScheduler(model_parts()[1], model_parts()[0], split_batches=1),
        TypeError,
        [r"`split_batches`", r"got 1 \(int\)", r"`split_batches=True` or `split_batches=False`"],
    ),
    (
        "reduce-lr-on-plateau-stepped-with-the-optimizer",
        lambda: ShardScheduler(
            torch.optim.lr_scheduler.ReduceLROnPlateau(model_parts()[0]),
            model_parts()[0],
            step_with_optimizer=True,
        ),
        ValueError,
        [r"`ReduceLROnPlateau`", r"`step_with_optimizer=True`", r"Pass `step_with_optimizer=False`"],
    ),
]


@pytest.mark.parametrize(
    ("build", "error", "patterns"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS]
)
def test_misuse_is_refused_at_once_with_a_helpful_message(
    build: Callable[[], Any], error: type[Exception], patterns: list[str]
) -> None:
    with pytest.raises(error) as info:
        build()
    assert type(info.value) is error, f"expected exactly {error.__name__}, got {type(info.value).__name__}"
    message = str(info.value)
    for pattern in patterns:
        assert re.search(pattern, message), f"{pattern!r} not in: {message}"


def test_the_table_covers_enough_misuses() -> None:
    assert len(ROWS) >= 20
    assert len({row[0] for row in ROWS}) == len(ROWS)


def test_the_same_objects_used_well_are_accepted() -> None:
    """The rows fail because of the misuse, not because of the fixtures they build on."""
    prepared().load_state_dict(saved_state())
    prepared(split_batches=True).load_state_dict(saved_state(split_batches=True))
    ShardOptions().replace(split_batches=True, dispatch_batches=True, put_on_device=True)
    skip_first_batches(prepared(), num_batches=1)
    optimizer, scheduler = model_parts()
    ShardScheduler(scheduler, ShardOptimizer(optimizer), num_processes=2)


# -- found at the first batch by nature: dispatched batches that cannot be concatenated --------------
class GrowingMap(Dataset):
    """Sample ``i`` has ``1 + i // 2`` values, so batches of 2 have a different width each."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((1 + index // 2,), index)


def dispatch_ragged(rank: int, world_size: int) -> dict[str, Any]:
    loader = prepare_data_loader(
        DataLoader(GrowingMap(), batch_size=2), dispatch_batches=True, put_on_device=True
    )
    start = time.monotonic()
    try:
        next(iter(loader))
    except Exception as error:  # noqa: BLE001 - the error is what this test checks
        return {"error": type(error).__name__, "message": str(error), "seconds": time.monotonic() - start}
    return {"error": None, "seconds": time.monotonic() - start}


@pytest.mark.dist
def test_dispatching_batches_that_cannot_be_concatenated_fails_on_every_process() -> None:
    process0, process1 = run_distributed(dispatch_ragged, 2, timeout=60)
    assert process0["error"] == "ValueError", process0
    assert "`dispatch_batches=True`" in process0["message"]
    assert "Tensor shapes: [(2, 1), (2, 2)]" in process0["message"]
    assert (
        "Pass `split_batches=True`" in process0["message"]
        and "`dispatch_batches=False`" in process0["message"]
    )
    # Process 1 is not left waiting for a batch (run_distributed would kill it and fail): it fails at
    # once, naming process 0's error.
    assert process1["error"] == "RuntimeError", process1
    assert "Process 0 failed" in process1["message"] and "ValueError" in process1["message"]
    assert "Tensor shapes" in process1["message"]
