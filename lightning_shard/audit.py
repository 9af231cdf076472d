"""``ShardAudit``: which samples the processes consumed in an epoch, exactly, in ``dataset / 8`` bytes.

Each process records the dataset indices it consumed in two bitmaps, *seen* (at least once) and *repeated*
(at least twice), plus a count of records: enough for exact totals (covered: the bits of *seen*; extra
consumptions: ``records - covered``; missing: ``dataset_length - covered``) and for an exact merge across
processes (docs/DESIGN.md, "Scale"). Padding and what ``drop_last`` drops are allowed, in the counts given.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from lightning_shard._checks import check_non_negative
from lightning_shard.comm import bitmaps
from lightning_shard.comm.collectives import all_reduce_ints, communication_device, is_distributed
from lightning_shard.loaders.position import ShardingInfo
from lightning_shard.sampling.balance import EvenBatches, is_balanced

_COUNT_CHUNK = 1 << 22
"""Samples per all-reduce of ``gather``: at most 16 MB of counts in flight, whatever the dataset."""


@dataclass(frozen=True)
class AuditReport:
    """What an epoch's processes consumed, against what ``dataset_length`` and the sharding allow.

    Attributes:
        dataset_length: samples in the dataset.
        records: sample consumptions recorded (over the processes gathered).
        covered: distinct samples consumed at least once.
        duplicates: consumptions beyond the first of each sample (``records - covered``).
        repeated: distinct samples consumed more than once.
        missing: samples never consumed (``dataset_length - covered``).
        allowed_padding, allowed_missing: what the sharding explains (``even_batches`` padding,
            samples ``drop_last`` drops).
        duplicate_examples, missing_examples: the first few such sample indices.
    """

    dataset_length: int
    records: int
    covered: int
    duplicates: int
    repeated: int
    missing: int
    allowed_padding: int
    allowed_missing: int
    duplicate_examples: tuple[int, ...]
    missing_examples: tuple[int, ...]

    @property
    def excess_duplicates(self) -> int:
        """Duplicates the padding does not explain."""
        return max(self.duplicates - self.allowed_padding, 0)

    @property
    def excess_missing(self) -> int:
        """Missing samples ``drop_last`` does not explain."""
        return max(self.missing - self.allowed_missing, 0)

    @property
    def ok(self) -> bool:
        return not self.problems()

    def summary(self) -> str:
        """One line: the counts, then OK or the problems with example indices."""
        return summary_line(self, "shard audit", f"{self.allowed_missing} allowed by drop_last")

    __str__ = summary

    def problems(self, check_missing: bool = True) -> list[str]:
        """The excess duplicates and (with ``check_missing``) excess missing samples, with example indices."""
        problems = []
        if self.excess_duplicates:
            examples = _listed(self.duplicate_examples)
            problems.append(f"{self.excess_duplicates} duplicates beyond the padding (e.g. {examples})")
        if check_missing and self.excess_missing:
            problems.append(f"{self.excess_missing} missing samples (e.g. {_listed(self.missing_examples)})")
        return problems

    def raise_on_problem(self) -> None:
        """Raise ``RuntimeError`` with the summary and the usual causes, unless the report is OK."""
        if not self.ok:
            raise RuntimeError(
                f"{self.summary()}. Duplicates beyond the padding mean processes read the same samples (a "
                "loader that is not sharded, e.g. built without `prepare_data_loader`); missing samples mean a "
                "loader sharded twice (a `DistributedSampler` or a `BatchSamplerShard` under "
                "`prepare_data_loader`) or an audit that started in the middle of an epoch."
            )


class ShardAudit:
    """Records the dataset indices this process consumed; ``gather`` and ``report`` check them.

    Args:
        dataset_length: samples in the dataset; recorded indices must lie in ``[0, dataset_length)``.
        allowed_padding: duplicates expected in the epoch over all processes (``even_batches`` padding).
        allowed_missing: samples expected to be skipped in the epoch (``drop_last``).

    Raises:
        TypeError / ValueError: on a count that is not a non-negative integer.
    """

    def __init__(self, dataset_length: int, *, allowed_padding: int = 0, allowed_missing: int = 0) -> None:
        self.dataset_length = check_non_negative(
            "dataset_length", dataset_length, "the number of samples, `len(dataset)`"
        )
        self.allowed_padding = check_non_negative(
            "allowed_padding", allowed_padding, "0 without `even_batches`"
        )
        self.allowed_missing = check_non_negative("allowed_missing", allowed_missing, "0 without `drop_last`")
        self.reset()

    @classmethod
    def for_loader(cls, loader: Any) -> ShardAudit:
        """An audit of one epoch of a loader built by ``prepare_data_loader``, with its padding allowed.

        Raises:
            ValueError: if the loader's dataset or batches have no length to audit against.
        """
        info = loader.sharding
        length, batch_size = info.dataset_length, info.batch_size
        if length is None or batch_size is None:
            raise ValueError(
                f"`ShardAudit.for_loader` needs a dataset with a length and a fixed batch size, got "
                f"`dataset_length={length}` and `batch_size={batch_size}`. Build "
                "`ShardAudit(dataset_length, allowed_padding=..., allowed_missing=...)` yourself."
            )
        padding, missing = sharding_allowances(info, length)
        return cls(length, allowed_padding=padding, allowed_missing=missing)

    def reset(self) -> None:
        """Forget everything recorded (at the start of an epoch)."""
        size = (self.dataset_length + 7) // 8
        self.seen = torch.zeros(size, dtype=torch.uint8)
        self.repeated = torch.zeros(size, dtype=torch.uint8)
        self.records = 0

    @property
    def covered(self) -> int:
        """Distinct samples recorded."""
        return bitmaps.popcount(self.seen)

    def record_indices(self, indices: Sequence[int] | torch.Tensor) -> None:
        """Record that this process consumed the samples ``indices`` (repeats count).

        Raises:
            ValueError: if an index lies outside ``[0, dataset_length)``.
        """
        flat = torch.as_tensor(indices, dtype=torch.int64).reshape(-1)
        bad = flat[(flat < 0) | (flat >= self.dataset_length)]
        if bad.numel():
            raise ValueError(
                f"`indices` contains {bad[: bitmaps.EXAMPLES].tolist()}, outside [0, {self.dataset_length}) for "
                f"`dataset_length={self.dataset_length}`. Record dataset indices, and build the audit with "
                "the length of the dataset the loader reads."
            )
        unique, counts = torch.unique(flat, return_counts=True)
        already = bitmaps.test_bits(self.seen, unique)
        twice = unique[already | (counts > 1)]
        bitmaps.set_bits(self.seen, unique[~already])
        bitmaps.set_bits(self.repeated, twice[~bitmaps.test_bits(self.repeated, twice)])
        self.records += flat.numel()

    def merge(self, other: ShardAudit) -> ShardAudit:
        """The audit of both processes' records together (this one's allowances are kept).

        Raises:
            ValueError: if the two audits are of datasets of different lengths.
        """
        if other.dataset_length != self.dataset_length:
            raise ValueError(
                f"Cannot merge an audit of `dataset_length={other.dataset_length}` into one of "
                f"`dataset_length={self.dataset_length}`. Audit the same dataset on every process."
            )
        merged = copy.copy(self)  # NOTE: this one's length and allowances; the records are replaced below.
        merged.seen = self.seen | other.seen
        merged.repeated = self.repeated | other.repeated | (self.seen & other.seen)
        merged.records = self.records + other.records
        return merged

    def gather(self, group: Any = None) -> ShardAudit:
        """The audit of every process's records (a collective: call it on every process), the same everywhere.

        Each sample's state on a process (0: unseen, 1: seen once, 2: repeated) is summed over the processes
        by all-reduces of ``_COUNT_CHUNK`` samples at a time, so a process sends, receives and holds
        ``O(dataset_length)`` bytes whatever the number of processes. Without a process group, a copy.

        Raises:
            ValueError: on every process, if the processes audit datasets of different lengths.
        """
        merged = self.merge(ShardAudit(self.dataset_length))
        if not is_distributed():
            return merged
        device = communication_device()
        # NOTE: audits of different lengths are refused on every process: their all-reduces would not pair.
        bounds = all_reduce_ints([self.dataset_length, -self.dataset_length], dist.ReduceOp.MAX, group)
        longest, shortest = bounds[0], -bounds[1]
        if longest != shortest:
            raise ValueError(
                f"`ShardAudit.gather` got audits of `dataset_length` from {shortest} to {longest} on the "
                f"processes (this one: {self.dataset_length}). Audit the same dataset on every process."
            )
        dtype = bitmaps.count_dtype(dist.get_world_size(group))
        for start in range(0, self.seen.numel(), _COUNT_CHUNK // 8):
            part = slice(start, start + _COUNT_CHUNK // 8)
            counts = bitmaps.states(self.seen[part], self.repeated[part]).to(device=device, dtype=dtype)
            dist.all_reduce(counts, group=group)
            counts = counts.cpu()
            merged.seen[part], merged.repeated[part] = bitmaps.pack(counts >= 1), bitmaps.pack(counts >= 2)
        merged.records = all_reduce_ints([self.records], dist.ReduceOp.SUM, group)[0]
        return merged

    def to_state(self) -> dict[str, Any]:
        """The records as plain data (the bitmaps base64-encoded): ``len(dataset) / 4`` bytes and a count."""
        return {
            "dataset_length": self.dataset_length,
            "records": self.records,
            "seen": bitmaps.encode(self.seen),
            "repeated": bitmaps.encode(self.repeated),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ShardAudit:
        """The records written by ``to_state`` (no allowances: merge them into the audit that has them).

        Raises:
            ValueError: if ``state`` is not such a record.
        """
        try:
            audit = cls(state["dataset_length"])
            seen, repeated = bitmaps.decode(state["seen"]), bitmaps.decode(state["repeated"])
            records = state["records"]
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(
                f"`state` is not an audit record written by `ShardAudit.to_state()` ({error!r}). Pass that dict "
                "unchanged."
            ) from error
        if seen.numel() != audit.seen.numel() or repeated.numel() != audit.seen.numel():
            raise ValueError(
                f"`state` holds bitmaps of {seen.numel()} bytes for `dataset_length={audit.dataset_length}`, which "
                f"needs {audit.seen.numel()}. Pass the dict `ShardAudit.to_state()` wrote, unchanged."
            )
        audit.seen, audit.repeated = seen, repeated
        audit.records = check_non_negative("records", records, "a count")
        return audit

    def report(self) -> AuditReport:
        """What the records show: coverage, duplicates and missing samples, with examples."""
        covered = self.covered
        return AuditReport(
            dataset_length=self.dataset_length,
            records=self.records,
            covered=covered,
            duplicates=self.records - covered,
            repeated=bitmaps.popcount(self.repeated),
            missing=self.dataset_length - covered,
            allowed_padding=self.allowed_padding,
            allowed_missing=self.allowed_missing,
            duplicate_examples=tuple(bitmaps.first(self.repeated, True, self.dataset_length)),
            missing_examples=tuple(bitmaps.first(self.seen, False, self.dataset_length)),
        )


def expected_padding_and_missing(
    dataset_length: int,
    batch_size: int,
    num_processes: int,
    *,
    split_batches: bool = False,
    even_batches: EvenBatches = True,
    drop_last: bool = False,
    dispatch: bool = False,
) -> tuple[int, int]:
    """Duplicates that padding adds, and samples ``drop_last`` drops, in one epoch over all processes, for
    loaders built by ``prepare_data_loader`` with a fixed ``batch_size`` (the user's)."""
    step = batch_size if split_batches else batch_size * num_processes
    rest = dataset_length % step if step else 0
    if drop_last:
        return 0, rest
    if num_processes == 1 or not rest:
        return 0, 0
    if dispatch:
        # NOTE: process 0 completes the last global batch to a multiple of N rows only.
        return -rest % num_processes, 0
    if is_balanced(even_batches, dataset_length, num_processes):
        return 0, 0
    return (step - rest if even_batches else 0), 0


def sharding_allowances(info: ShardingInfo, length: int) -> tuple[int, int]:
    """``expected_padding_and_missing`` for ``length`` samples sharded as ``info`` says."""
    return expected_padding_and_missing(
        length,
        info.batch_size or 0,
        info.num_processes,
        split_batches=info.split_batches,
        even_batches=info.even_batches,
        drop_last=info.drop_last,
        dispatch=info.mode == "dispatch",
    )


def summary_line(
    report: AuditReport, heading: str, missing_allowed: str, *, check_missing: bool = True, note: str = ""
) -> str:
    """``heading``, ``report``'s counts (the allowed missing samples in the words of ``missing_allowed``) and
    ``note``, then OK or the problems with example indices (missing samples not one without ``check_missing``)."""
    problems = report.problems(check_missing)
    return (
        f"{heading}: {report.dataset_length} samples, {report.covered} covered, {report.duplicates} duplicates "
        f"({report.allowed_padding} allowed as padding), {report.missing} missing ({missing_allowed}){note}: "
        f"{'PROBLEM: ' + '; '.join(problems) if problems else 'OK'}"
    )


def _listed(indices: tuple[int, ...]) -> str:
    return ", ".join(map(str, indices)) or "-"
