"""``ShardAudit``: exact counts against a ``Counter`` oracle, the padding each sharding promises, and
2-process runs where a correctly sharded loader passes and a double- or un-sharded one is caught."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from lightning_shard import BatchSamplerShard, DataLoaderShard, prepare_data_loader
from lightning_shard import audit as audit_module
from lightning_shard.audit import ShardAudit, expected_padding_and_missing
from lightning_shard.comm import bitmaps
from lightning_shard.comm.collectives import all_true
from tests.helpers.datasets import IdMap, IdStream
from tests.helpers.dist import run_distributed


# -- exact counts, one process ----------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 70).flatmap(
        lambda length: st.tuples(
            st.just(length),
            st.lists(
                st.lists(st.lists(st.integers(0, max(length - 1, 0)), max_size=12), max_size=4), max_size=4
            )
            if length
            else st.just([]),
        )
    )
)
def test_counts_are_exact_however_records_are_split_and_merged(
    case: tuple[int, list[list[list[int]]]],
) -> None:
    """Processes (outer lists) record batches (inner lists); merging them equals counting all at once."""
    length, processes = case
    audits = []
    for batches in processes:
        audit = ShardAudit(length)
        for batch in batches:
            audit.record_indices(batch)
        audits.append(audit)
    merged = ShardAudit(length)
    for audit in reversed(audits):
        merged = merged.merge(audit)
    counts = Counter(index for batches in processes for batch in batches for index in batch)
    report = merged.report()
    assert report.records == sum(counts.values())
    assert report.covered == len(counts)
    assert report.duplicates == sum(counts.values()) - len(counts)
    assert report.repeated == sum(1 for count in counts.values() if count > 1)
    assert report.missing == length - len(counts)
    assert (
        list(report.duplicate_examples) == sorted(index for index, count in counts.items() if count > 1)[:5]
    )
    assert list(report.missing_examples) == sorted(set(range(length)) - set(counts))[:5]
    assert report.ok == (report.duplicates == 0 and report.missing == 0)


def test_bitmaps_take_one_bit_per_sample() -> None:
    audit = ShardAudit(1_000_001)
    audit.record_indices(torch.arange(0, 1_000_001, 3))
    assert audit.seen.numel() == audit.repeated.numel() == math.ceil(1_000_001 / 8)
    assert audit.seen.dtype == torch.uint8
    assert audit.report().covered == len(range(0, 1_000_001, 3))


def test_summary_is_one_line_and_raise_on_problem_names_the_causes() -> None:
    audit = ShardAudit(10, allowed_padding=1)
    audit.record_indices([0, 1, 2, 2, 2, 9])
    report = audit.report()
    assert report.summary() == (
        "shard audit: 10 samples, 4 covered, 2 duplicates (1 allowed as padding), 6 missing (0 allowed by "
        "drop_last): PROBLEM: 1 duplicates beyond the padding (e.g. 2); 6 missing samples (e.g. 3, 4, 5, 6, 7)"
    )
    with pytest.raises(RuntimeError, match="not sharded.*sharded twice"):
        report.raise_on_problem()
    audit.reset()
    assert audit.records == 0 and audit.report().missing == 10
    audit.record_indices(torch.tensor([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]))
    audit.record_indices([0])
    assert audit.report().ok and str(audit.report()).endswith(
        "1 duplicates (1 allowed as padding), 0 missing (0 allowed by drop_last): OK"
    )
    audit.report().raise_on_problem()


@pytest.mark.parametrize(
    ("build", "error", "pattern"),
    [
        (
            lambda: ShardAudit(10).record_indices([3, 10, -1]),
            ValueError,
            r"`indices` contains \[10, -1\].*`dataset_length=10`",
        ),
        (lambda: ShardAudit(-1), ValueError, r"`dataset_length`.*got -1\. Pass the number of samples"),
        (lambda: ShardAudit(10.0), TypeError, r"`dataset_length`.*got 10\.0 \(float\)"),
        (
            lambda: ShardAudit(10, allowed_padding=-2),
            ValueError,
            r"`allowed_padding`.*-2.*0 without `even_batches`",
        ),
        (lambda: ShardAudit(10).merge(ShardAudit(11)), ValueError, r"`dataset_length=11`.*same dataset"),
        (
            lambda: ShardAudit.for_loader(
                prepare_data_loader(DataLoader(IdMap(8), batch_sampler=[[0, 1], [2]]))
            ),
            ValueError,
            r"`batch_size=None`.*ShardAudit\(dataset_length",
        ),
    ],
    ids=[
        "index-out-of-range",
        "negative-length",
        "float-length",
        "negative-padding",
        "merge-lengths",
        "no-batch-size",
    ],
)
def test_misuse_is_refused(build: Any, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        build()


# -- the padding each sharding promises, checked against real loaders -------------------------------
@settings(max_examples=150, deadline=None)
@given(
    iterable=st.booleans(),
    length=st.integers(0, 50),
    per=st.integers(1, 5),
    num_processes=st.integers(1, 4),
    split_batches=st.booleans(),
    even_batches=st.booleans(),
    drop_last=st.booleans(),
)
def test_for_loader_allows_exactly_the_padding_and_drops_of_the_sharding(
    iterable: bool,
    length: int,
    per: int,
    num_processes: int,
    split_batches: bool,
    even_batches: bool,
    drop_last: bool,
) -> None:
    batch_size = per * num_processes if split_batches else per
    dataset = IdStream(list(range(length))) if iterable else IdMap(length)
    counts: Counter[int] = Counter()
    audits = []
    for rank in range(num_processes):
        loader = prepare_data_loader(
            DataLoader(dataset, batch_size=batch_size, drop_last=drop_last),
            num_processes=num_processes,
            process_index=rank,
            split_batches=split_batches,
            even_batches=even_batches,
        )
        audit = ShardAudit.for_loader(loader)
        for batch in loader:
            audit.record_indices(batch)
            counts.update(batch.tolist())
        audits.append(audit)
    merged = audits[0]
    for audit in audits[1:]:
        merged = merged.merge(audit)
    report = merged.report()
    # The allowances are exact: what the loaders really padded and dropped, not an upper bound.
    assert report.allowed_padding == sum(counts.values()) - len(counts)
    assert report.allowed_missing == length - len(counts)
    assert report.ok, report.summary()


@pytest.mark.parametrize(
    ("arguments", "options", "expected"),
    [
        ((23, 3, 2), {}, (1, 0)),  # global batches of 6: the last has 5, padded with 1
        ((23, 3, 2), {"even_batches": False}, (0, 0)),
        ((23, 3, 2), {"drop_last": True}, (0, 5)),
        ((23, 4, 2), {"split_batches": True}, (1, 0)),  # global batches of 4: the last has 3
        ((23, 3, 1), {}, (0, 0)),  # one process never pads
        ((23, 3, 2), {"dispatch": True}, (1, 0)),  # process 0 pads the last 5 rows to 6
        ((22, 4, 3), {"dispatch": True}, (2, 0)),  # ... and the last 10 rows to 12, not to 24
        ((0, 3, 4), {}, (0, 0)),
    ],
)
def test_expected_padding_and_missing(
    arguments: tuple[int, int, int], options: dict[str, Any], expected: Any
) -> None:
    assert expected_padding_and_missing(*arguments, **options) == expected


# -- two processes ----------------------------------------------------------------------------------
def audited(loader: Any, audit: ShardAudit) -> str:
    """Iterate ``loader`` recording every batch; the report of all processes together."""
    for batch in loader:
        audit.record_indices(batch)
    return audit.gather().report().summary()


def unsharded(length: int, batch_size: int) -> DataLoaderShard:
    """A shard built on a ``BatchSamplerShard`` applied twice: each process gets a part of its part."""
    rank = torch.distributed.get_rank()
    inner = BatchSamplerShard(
        BatchSampler(SequentialSampler(range(length)), batch_size, False), num_processes=2, process_index=rank
    )
    return DataLoaderShard(
        IdMap(length), batch_sampler=BatchSamplerShard(inner, num_processes=2, process_index=rank)
    )


def audit_runs(rank: int, world_size: int) -> dict[str, str]:
    results = {}
    shard = prepare_data_loader(DataLoader(IdMap(23), batch_size=3))
    results["shard"] = audited(shard, ShardAudit.for_loader(shard))
    split = prepare_data_loader(DataLoader(IdMap(23), batch_size=4, drop_last=True), split_batches=True)
    results["split, drop_last"] = audited(split, ShardAudit.for_loader(split))
    dispatch = prepare_data_loader(
        DataLoader(IdMap(23), batch_size=3), dispatch_batches=True, put_on_device=True
    )
    results["dispatch"] = audited(dispatch, ShardAudit.for_loader(dispatch))
    results["not sharded"] = audited(DataLoader(IdMap(23), batch_size=3), ShardAudit(23))
    results["sharded twice"] = audited(unsharded(23, 3), ShardAudit(23))
    # Streams of the same length but different elements: the processes end together, the data is wrong.
    # NOTE: declared the same on every process, so the same-stream check (which refuses it at its first
    # batch, tests/loaders/test_same_stream.py) is off and the audit is what finds it.
    stream = IdStream([index + 7 * rank for index in range(16)])
    stream.splits_by_rank = False
    iterable = prepare_data_loader(DataLoader(stream, batch_size=2))
    results["iterable differing by process"] = audited(iterable, ShardAudit(23, allowed_padding=0))
    return results


@pytest.mark.dist
def test_audit_across_two_processes() -> None:
    results = run_distributed(audit_runs, 2, timeout=60)
    assert results[0] == results[1], "gather gives every process the same report"
    report = results[0]
    assert report == {
        "shard": "shard audit: 23 samples, 23 covered, 1 duplicates (1 allowed as padding), "
        "0 missing (0 allowed by drop_last): OK",
        "split, drop_last": "shard audit: 23 samples, 20 covered, 0 duplicates (0 allowed as padding), "
        "3 missing (3 allowed by drop_last): OK",
        "dispatch": "shard audit: 23 samples, 23 covered, 1 duplicates (1 allowed as padding), "
        "0 missing (0 allowed by drop_last): OK",
        "not sharded": "shard audit: 23 samples, 23 covered, 23 duplicates (0 allowed as padding), "
        "0 missing (0 allowed by drop_last): PROBLEM: 23 duplicates beyond the padding (e.g. 0, 1, 2, 3, 4)",
        "sharded twice": "shard audit: 23 samples, 11 covered, 1 duplicates (0 allowed as padding), "
        "12 missing (0 allowed by drop_last): PROBLEM: 1 duplicates beyond the padding (e.g. 0); "
        "12 missing samples (e.g. 3, 4, 5, 6, 7)",
        "iterable differing by process": "shard audit: 23 samples, 14 covered, 2 duplicates (0 allowed as "
        "padding), 9 missing (0 allowed by drop_last): PROBLEM: 2 duplicates beyond the padding (e.g. 9, 13); "
        "9 missing samples (e.g. 2, 3, 6, 7, 11)",
    }


# -- the merge at scale: compact counts, not every process's bitmaps ------------------------------
def _chunked_records(rank: int) -> list[int]:
    """Records on both sides of the first all-reduce chunk's end, overlapping between the processes."""
    edge = audit_module._COUNT_CHUNK
    mine = [edge - 3, edge - 2, edge, edge + 5, 7, 7] if rank == 0 else [edge - 2, edge + 5, edge + 9, 8]
    return [*mine, *range(rank, 64, 3)]


def gather_runs(rank: int, world_size: int) -> dict[str, Any]:
    length = audit_module._COUNT_CHUNK + 100  # two all-reduces, the second short
    audit = ShardAudit(length, allowed_padding=1)
    audit.record_indices(_chunked_records(rank))
    gathered = audit.gather()
    results: dict[str, Any] = {"report": gathered.report(), "state": gathered.to_state()}
    try:
        ShardAudit(10 + rank).gather()
    except ValueError as error:
        results["lengths"] = str(error)
    # NOTE: the audit callback's end-of-epoch agreement (whether every process ended its epoch).
    results["all_true"] = [all_true(True), all_true(rank == 0), all_true(rank == 1), all_true(False)]
    return results


@pytest.mark.dist
def test_gather_sums_compact_counts_exactly_across_chunks() -> None:
    results = run_distributed(gather_runs, 2, timeout=120)
    assert results[0]["report"] == results[1]["report"] and results[0]["state"] == results[1]["state"]
    length = audit_module._COUNT_CHUNK + 100
    oracle = ShardAudit(length, allowed_padding=1)
    for rank in range(2):
        part = ShardAudit(length)
        part.record_indices(_chunked_records(rank))
        oracle = oracle.merge(part)
    assert results[0]["report"] == oracle.report()
    assert results[0]["state"] == oracle.to_state(), "the same bitmaps as merging the processes' audits"
    counts = Counter(index for rank in range(2) for index in _chunked_records(rank))
    assert results[0]["report"].repeated == sum(1 for count in counts.values() if count > 1)
    assert results[0]["all_true"] == results[1]["all_true"] == [True, False, False, False]
    for rank in range(2):  # refused on every process, so none is left waiting in a collective
        assert "`dataset_length` from 10 to 11" in results[rank]["lengths"]
        assert f"(this one: {10 + rank})" in results[rank]["lengths"]


def test_counts_fit_their_type_at_any_number_of_processes() -> None:
    for processes in (1, 2, 127, 128, 16_384, 1 << 30):
        dtype = bitmaps.count_dtype(processes)
        assert 2 * processes <= torch.iinfo(dtype).max
    assert bitmaps.count_dtype(127) == torch.uint8 and bitmaps.count_dtype(128) == torch.int32


def test_states_pack_back_into_the_bitmaps() -> None:
    audit = ShardAudit(37)
    audit.record_indices([0, 3, 3, 9, 36, 36, 36, 20])
    states = bitmaps.states(audit.seen, audit.repeated)
    assert (
        states[:37].tolist() == [{0: 1, 3: 2, 9: 1, 36: 2, 20: 1}.get(index, 0) for index in range(37)]
        and not states[37:].any()
    )
    assert torch.equal(bitmaps.pack(states >= 1), audit.seen)
    assert torch.equal(bitmaps.pack(states >= 2), audit.repeated)
