"""Fast tests of the shard audit in Lightning (``ShardAuditCallback``): one process, no launch."""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import DataLoader

from lightning_shard import ShardAudit, prepare_data_loader
from lightning_shard.lightning import EpochAudit, ShardStrategy
from lightning_shard.lightning.audit_callback import IndexTap, ShardAuditCallback, _epoch_audit
from tests.helpers.lightning_app import SizedRecordStream, loader


def _shard(length: int, batch_size: int, num_processes: int = 1, **kwargs: Any) -> Any:
    return prepare_data_loader(
        loader(length, batch_size, **kwargs), num_processes=num_processes, process_index=0
    )


def test_the_tap_pairs_each_consumed_batch_with_its_indices_despite_read_ahead() -> None:
    shard = _shard(40, 3, shuffle=True, num_workers=2)
    tap = IndexTap()
    shard.index_observer = tap
    read_ahead = 0
    for batch in shard:
        read_ahead = max(read_ahead, len(tap.pending))
        assert tap.take() == [batch["id"].tolist()]
    assert read_ahead > 1, "the workers read ahead of the consumed batches"
    assert not tap.pending


def test_the_tap_forgets_what_an_abandoned_iteration_read_ahead() -> None:
    shard = _shard(40, 3)
    tap = IndexTap()
    shard.index_observer = tap
    iterator = iter(shard)
    next(iterator)
    tap.take()
    assert tap.pending, "the loader reads one batch ahead"
    shard.set_epoch(1)
    first = next(iter(shard))
    assert tap.take() == [first["id"].tolist()]


def test_the_loader_says_what_observes_its_indices_and_refuses_an_iterable_dataset() -> None:
    shard = _shard(10, 2)
    assert shard.index_observer is None
    tap = IndexTap()
    shard.index_observer = tap
    assert shard.index_observer is tap and shard.cursor is not None and shard.cursor.observer is tap
    stream = prepare_data_loader(
        DataLoader(SizedRecordStream(10), batch_size=2), num_processes=1, process_index=0
    )
    assert stream.index_observer is None
    with pytest.raises(ValueError, match="is iterable, so its batches have no indices to observe"):
        stream.index_observer = tap


def test_a_dispatcher_takes_a_whole_global_batch_per_step() -> None:
    tap = IndexTap(per_step=2)
    assert list(tap(iter([[0, 1], [2, 3], [4]]))) == [[0, 1], [2, 3], [4]]
    assert tap.take() == [[0, 1], [2, 3]] and tap.take() == [[4]] and tap.take() == []


def test_the_epoch_audit_allows_the_padding_and_what_a_resumed_run_skipped() -> None:
    shard = _shard(50, 4, num_processes=2)  # 7 steps of 2 x 4: the last one padded with 6 samples
    audit, before = _epoch_audit(shard, 0)
    assert (before, audit.allowed_padding, audit.allowed_missing) == (0, 6, 0)
    audit, before = _epoch_audit(shard, 4)
    assert (before, audit.allowed_padding, audit.allowed_missing) == (32, 6, 32)
    audit, before = _epoch_audit(_shard(50, 4, num_processes=2, drop_last=True), 0)
    assert (before, audit.allowed_padding, audit.allowed_missing) == (0, 0, 2)


def _report(records: list[int], length: int = 10, padding: int = 2) -> Any:
    audit = ShardAudit(length, allowed_padding=padding)
    audit.record_indices(records)
    return audit.gather().report()


def test_the_epoch_summary() -> None:
    ok = EpochAudit(3, _report([*range(10), 0, 1]), resumed_after=0, complete=True)
    assert ok.ok and ok.summary() == (
        "shard audit, epoch 3: 10 samples, 10 covered, 2 duplicates (2 allowed as padding), "
        "0 missing (0 allowed): OK"
    )
    early = EpochAudit(0, _report([0, 1, 2]), resumed_after=0, complete=False)
    assert early.ok and "7 missing (not checked: the epoch stopped before its end): OK" in early.summary()
    twice = EpochAudit(0, _report([0, 1, 2, 0, 1, 2, 0, 1, 2]), resumed_after=0, complete=False)
    assert not twice.ok and "PROBLEM: 4 duplicates beyond the padding (e.g. 0, 1, 2)" in twice.summary()
    resumed = ShardAudit(10, allowed_missing=4)
    resumed.record_indices(range(4, 10))
    after = EpochAudit(1, resumed.gather().report(), resumed_after=4, complete=True)
    assert after.ok and "4 missing (4 allowed, 4 consumed before the resume): OK" in after.summary()


def test_a_problem_raises_with_the_summary_and_the_fix() -> None:
    missing = EpochAudit(0, _report([0, 1, 2]), resumed_after=0, complete=True)
    with pytest.raises(RuntimeError, match="7 missing samples") as raised:
        missing.raise_on_problem()
    assert "sharded twice" in str(raised.value) and "`audit_raise=False`" in str(raised.value)


def test_the_strategy_audit_arguments() -> None:
    assert ShardStrategy().audits == [] and ShardStrategy(audit=True).audits == []
    assert any(isinstance(c, ShardAuditCallback) for c in ShardStrategy(audit=True)._sharding.callbacks)
    assert not any(isinstance(c, ShardAuditCallback) for c in ShardStrategy()._sharding.callbacks)
    with pytest.raises(TypeError, match="`audit` must be True or False, got 'yes'"):
        ShardStrategy(audit="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Set `audit=True` as well"):
        ShardStrategy(audit_raise=True)


def test_an_iterable_dataset_is_not_audited(caplog: pytest.LogCaptureFixture) -> None:
    shard = prepare_data_loader(
        DataLoader(SizedRecordStream(10), batch_size=2), num_processes=1, process_index=0
    )
    callback = ShardAuditCallback()
    with caplog.at_level("INFO"):
        callback.watch(shard)
    assert "its dataset is iterable, so its samples have no indices to record" in caplog.text
