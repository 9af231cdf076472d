"""Bad input to the core samplers (docs/DESIGN.md, "Bad input"): an exception at construction whose message names
the parameter (in backticks), the value received, and a fix."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from torch.utils.data import BatchSampler, SequentialSampler

from lightning_shard import BatchSamplerShard, IterableDatasetShard, SeedableRandomSampler, SkipBatchSampler
from tests.helpers.datasets import IdStream


def batches(batch_size: int = 10) -> BatchSampler:
    return BatchSampler(SequentialSampler(range(100)), batch_size=batch_size, drop_last=False)


def raised(build: Callable[[], Any], error: type[Exception]) -> str:
    """Build, expect ``error`` at construction, and return its message."""
    with pytest.raises(error) as info:
        build()
    return str(info.value)


def assert_names(message: str, parameter: str, value: str, fix: str) -> None:
    """The message names ``parameter`` in backticks, shows ``value`` and proposes ``fix``."""
    assert f"`{parameter}" in message, message
    assert re.search(rf"(?<![\w.]){re.escape(value)}(?!\w|\.\d)", message), message
    assert fix in message, message


# (case id, constructor, error, parameter, value shown, words of the fix)
CASES: list[tuple[str, Callable[[], Any], type[Exception], str, str, str]] = [
    (
        "shard-split-not-multiple",
        lambda: BatchSamplerShard(batches(10), num_processes=4, split_batches=True),
        ValueError,
        "split_batches",
        "10",
        "Use a batch size of 8 or 12, or set `split_batches=False`",
    ),
    (
        "shard-split-smaller-than-n",
        lambda: BatchSamplerShard(batches(3), num_processes=4, split_batches=True),
        ValueError,
        "split_batches",
        "3",
        "Use a batch size of 4, or set `split_batches=False`",
    ),
    (
        "shard-split-no-batch-size",
        lambda: BatchSamplerShard([[0, 1], [2]], num_processes=2, split_batches=True),
        ValueError,
        "split_batches",
        "batch_size=None",
        "set `split_batches=False`",
    ),
    (
        "iterable-split-not-multiple",
        lambda: IterableDatasetShard(
            IdStream(10, sized=False), batch_size=10, num_processes=4, split_batches=True
        ),
        ValueError,
        "split_batches",
        "10",
        "Use a batch size of 8 or 12, or set `split_batches=False`",
    ),
    (
        "shard-num-processes-zero",
        lambda: BatchSamplerShard(batches(), num_processes=0),
        ValueError,
        "num_processes",
        "0",
        "e.g. `num_processes=2`",
    ),
    (
        "shard-num-processes-negative",
        lambda: BatchSamplerShard(batches(), num_processes=-2),
        ValueError,
        "num_processes",
        "-2",
        "e.g. `num_processes=2`",
    ),
    (
        "shard-num-processes-float",
        lambda: BatchSamplerShard(batches(), num_processes=2.0),
        TypeError,
        "num_processes",
        "2.0",
        "`num_processes=2`",
    ),
    (
        "shard-num-processes-str",
        lambda: BatchSamplerShard(batches(), num_processes="2"),
        TypeError,
        "num_processes",
        "'2'",
        "`num_processes=2`",
    ),
    (
        "shard-num-processes-bool",
        lambda: BatchSamplerShard(batches(), num_processes=True),
        TypeError,
        "num_processes",
        "True",
        "`num_processes=2`",
    ),
    (
        "iterable-num-processes-zero",
        lambda: IterableDatasetShard(IdStream(10, sized=False), num_processes=0),
        ValueError,
        "num_processes",
        "0",
        "Pass the number of data-parallel processes",
    ),
    (
        "shard-process-index-too-large",
        lambda: BatchSamplerShard(batches(), num_processes=2, process_index=2),
        ValueError,
        "process_index",
        "2",
        "between 0 and 1",
    ),
    (
        "shard-process-index-negative",
        lambda: BatchSamplerShard(batches(), num_processes=3, process_index=-1),
        ValueError,
        "process_index",
        "-1",
        "between 0 and 2",
    ),
    (
        "shard-process-index-float",
        lambda: BatchSamplerShard(batches(), num_processes=3, process_index=1.0),
        TypeError,
        "process_index",
        "1.0",
        "between 0 and 2",
    ),
    (
        "iterable-process-index-too-large",
        lambda: IterableDatasetShard(IdStream(10, sized=False), num_processes=4, process_index=4),
        ValueError,
        "process_index",
        "4",
        "between 0 and 3",
    ),
    (
        "iterable-batch-size-zero",
        lambda: IterableDatasetShard(IdStream(10, sized=False), batch_size=0),
        ValueError,
        "batch_size",
        "0",
        "Pass the number of samples per batch",
    ),
    (
        "skip-batches-negative",
        lambda: SkipBatchSampler(batches(), skip_batches=-1),
        ValueError,
        "skip_batches",
        "-1",
        "Pass 0 to skip nothing",
    ),
    (
        "skip-batches-float",
        lambda: SkipBatchSampler(batches(), skip_batches=1.5),
        TypeError,
        "skip_batches",
        "1.5",
        "`skip_batches=0`",
    ),
    (
        "iterable-batch-size-negative",
        lambda: IterableDatasetShard(IdStream(10, sized=False), batch_size=-3),
        ValueError,
        "batch_size",
        "-3",
        "Pass the number of samples per batch",
    ),
    (
        "iterable-batch-size-float",
        lambda: IterableDatasetShard(IdStream(10, sized=False), batch_size=2.5),
        TypeError,
        "batch_size",
        "2.5",
        "Pass the number of samples per batch",
    ),
    (
        "data-seed-str",
        lambda: SeedableRandomSampler(range(10), data_seed="42"),
        TypeError,
        "data_seed",
        "'42'",
        "`data_seed=1234`",
    ),
    (
        "data-seed-float",
        lambda: SeedableRandomSampler(range(10), data_seed=4.2),
        TypeError,
        "data_seed",
        "4.2",
        "`data_seed=1234`",
    ),
]


@pytest.mark.parametrize(
    ("build", "error", "parameter", "value", "fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_refused_at_construction_with_a_helpful_message(
    build: Callable[[], Any], error: type[Exception], parameter: str, value: str, fix: str
) -> None:
    assert_names(raised(build, error), parameter, value, fix)


def test_num_processes_none_is_refused_by_the_samplers() -> None:
    """Only `prepare_data_loader` reads `None` from torch.distributed; the samplers need a number."""
    message = raised(lambda: BatchSamplerShard(batches(), num_processes=None), TypeError)
    assert_names(message, "num_processes", "None", "`num_processes=2`")


def test_errors_come_before_any_iteration() -> None:
    """A valid configuration builds; the errors above are raised by the constructor alone."""
    BatchSamplerShard(batches(8), num_processes=4, process_index=3, split_batches=True)
    IterableDatasetShard(
        IdStream(10, sized=False), batch_size=8, num_processes=4, process_index=3, split_batches=True
    )
    SkipBatchSampler(batches(), skip_batches=0)
    SeedableRandomSampler(range(10), data_seed=0)
