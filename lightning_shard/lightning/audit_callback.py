"""``ShardAuditCallback``: which samples each training epoch consumed, checked on every epoch's end.

The indices come from the loader's index source (``loader.index_observer``), so any map-style dataset can
be audited. The source runs ahead of training (prefetching, workers, a dispatcher), so the batches of
indices it yields wait in a queue, and each training step that ends takes the oldest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lightning_shard.audit import AuditReport, ShardAudit, sharding_allowances, summary_line
from lightning_shard.comm.collectives import all_true
from lightning_shard.lightning.stages import ShardLoader, flatten_loaders, is_shard_loader
from lightning_shard.log import info

_BUFFERED = 8192
"""Indices kept before they are recorded: one bitmap update per few hundred steps, not one per step."""


class IndexTap:
    """Queues the batches of indices a loader's cursor yields, until the training steps consume them
    (``per_step`` per step: ``N`` on process 0 of a dispatched loader without ``split_batches``)."""

    def __init__(self, per_step: int = 1) -> None:
        self.per_step = per_step
        self.pending: deque[Any] = deque()

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        """Observe a new iteration of the cursor; what the previous one read ahead was never consumed."""
        self.pending.clear()
        return self._queued(batches)

    def _queued(self, batches: Iterator[Any]) -> Iterator[Any]:
        for indices in batches:
            self.pending.append(indices)
            yield indices

    def take(self) -> list[Any]:
        """The batches of indices of the step that just ended (none on a process that loads nothing)."""
        return [self.pending.popleft() for _ in range(min(self.per_step, len(self.pending)))]


@dataclass(frozen=True)
class EpochAudit:
    """One training epoch's audit: the merged report (the same on every process) and what limits it."""

    epoch: int
    report: AuditReport
    resumed_after: int
    """Samples consumed before this run resumed the epoch; without ``recorded_before`` they count as
    allowed missing."""
    complete: bool
    """Whether the epoch ran to its end; if not, missing samples are not checked."""
    recorded_before: int = 0
    """Consumptions recorded before the resume, carried by the checkpoint: the audit covers the whole epoch."""

    @property
    def ok(self) -> bool:
        """No duplicates beyond the padding, and no missing samples beyond those allowed."""
        return not self.report.problems(check_missing=self.complete)

    def summary(self) -> str:
        """The line rank 0 logs: the counts, then OK or the problems with example indices."""
        heading = f"shard audit, epoch {self.epoch}"
        missing = "not checked: the epoch stopped before its end"
        if self.complete:
            missing = f"{self.report.allowed_missing} allowed"
            if self.resumed_after and not self.recorded_before:
                missing += f", {self.resumed_after} consumed before the resume"
        note = (
            f", {self.recorded_before} of the records from before the resume" if self.recorded_before else ""
        )
        return summary_line(self.report, heading, missing, check_missing=self.complete, note=note)

    def raise_on_problem(self) -> None:
        """Raise ``RuntimeError`` with the summary and the usual causes, unless the epoch is OK."""
        if not self.ok:
            raise RuntimeError(
                f"{self.summary()}. Duplicates beyond the padding mean that processes read the same samples "
                "(e.g. a sampler that shuffles differently on each process); missing samples mean that the data "
                "was sharded twice (e.g. a sampler that already keeps only this process's share). Give "
                "`ShardStrategy` loaders that read the whole dataset in the same order on every process, or "
                "set `audit_raise=False` to only log the audit."
            )


class ShardAuditCallback(Callback):
    """Audits every training epoch: samples covered, duplicates beyond the padding, samples missing.

    At each epoch's end the processes merge their records (``ShardAudit.gather``, a collective) and rank
    0 logs one line. Only map-style datasets with a length and a fixed batch size and a single training
    loader are audited; otherwise rank 0 says why not.

    Args:
        raise_on_problem: raise ``RuntimeError`` on every process at the end of an epoch with
            duplicates beyond the padding or missing samples.
    """

    def __init__(self, *, raise_on_problem: bool = False) -> None:
        self.raise_on_problem = raise_on_problem
        self.audits: list[EpochAudit] = []
        self._epoch: int | None = None
        self._loader: ShardLoader | None = None
        self._audit: ShardAudit | None = None
        self._resumed_after = 0
        self._before: ShardAudit | None = None
        self._restored: dict[int, ShardAudit] = {}
        """The records a checkpoint carried, by their epoch."""
        self._buffer: list[Any] = []
        self._explained: set[str] = set()
        self._records = True

    def watch(self, loader: ShardLoader, *, records: bool = True) -> None:
        """Record what ``loader``'s training steps consume; call it before the loader's first ``iter()``.

        ``records=False``: another process records these batches (a tensor-parallel peer under a mesh); this
        one still takes part in each epoch's merge.
        """
        self._records = records
        if not loader.kind.indexed:
            self._explain(
                "its dataset is iterable, so its samples have no indices to record (a stream's samples read, "
                "padded and left unseen are logged at each epoch's end)"
            )
            return
        sharding = loader.sharding
        if sharding.dataset_length is None or sharding.batch_size is None:
            self._explain("its dataset has no length, or its batches no fixed size")
            return
        # NOTE: a dispatcher's process 0 loads (so its cursor yields) the `N` batches of a step.
        joins = loader.kind.dispatch and not sharding.split_batches
        loader.index_observer = IndexTap(sharding.num_processes if joins else 1)

    # -- per step ---------------------------------------------------------------------------------
    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # NOTE: a fit that failed mid-epoch left its epoch's records behind.
        self._epoch, self._loader, self._audit, self._buffer = None, None, None, []

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._epoch == trainer.current_epoch:
            return
        self._epoch = trainer.current_epoch
        self._loader = self._training_loader(trainer)
        # NOTE: the records a checkpoint carried for this epoch are taken once.
        self._before, self._restored = self._restored.get(self._epoch), {}
        self._audit, self._buffer = None, []
        if self._loader is not None:
            self._audit, self._resumed_after = _epoch_audit(self._loader, batch_idx, self._before is not None)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        tap = None if self._loader is None else self._loader.index_observer
        if self._audit is None or not isinstance(tap, IndexTap):
            return
        for indices in tap.take():
            if self._records:
                self._buffer.extend(indices)
        if len(self._buffer) >= _BUFFERED:
            self._record()

    def _record(self) -> None:
        if self._audit is not None and self._buffer:
            self._audit.record_indices(self._buffer)
        self._buffer = []

    # -- per epoch --------------------------------------------------------------------------------
    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record()
        audit, loader = self._audit, self._loader
        self._audit, self._loader, self._epoch = None, None, None
        if audit is None or loader is None:
            return
        report = self._merged(audit).report()
        # NOTE: agreed by all, so that every process raises, or none: one raising alone would leave the
        # others waiting in their next collective.
        # NOTE: one integer's minimum, whatever the number of processes (docs/DESIGN.md, "Scale").
        complete = all_true(loader.end_of_dataloader)
        before = 0 if self._before is None else self._before.records
        result = EpochAudit(trainer.current_epoch, report, self._resumed_after, complete, before)
        self.audits.append(result)
        info(result.summary())
        if self.raise_on_problem:
            result.raise_on_problem()

    def _merged(self, audit: ShardAudit) -> ShardAudit:
        """Every process's records of the epoch (a collective), with those from before a resume."""
        merged = audit.gather()
        return merged if self._before is None else merged.merge(self._before)

    # -- checkpoints ------------------------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        """The epoch's records so far, merged over the processes, so a resumed epoch's audit covers it all.

        NOTE: a collective; Lightning builds a checkpoint on every process.
        """
        if self._audit is None or self._epoch is None:
            return {}
        self._record()
        return {"epoch": self._epoch, "record": self._merged(self._audit).to_state()}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = {}
        if state_dict:
            self._restored = {int(state_dict["epoch"]): ShardAudit.from_state(state_dict["record"])}

    def _training_loader(self, trainer: pl.Trainer) -> ShardLoader | None:
        """The one sharded and watched training loader, or ``None`` (after saying why, once)."""
        loaders = [loader for loader in flatten_loaders(trainer.train_dataloader) if is_shard_loader(loader)]
        if len(loaders) != 1:
            self._explain(f"the fit has {len(loaders)} sharded training loaders, and only one can be audited")
            return None
        return loaders[0] if isinstance(loaders[0].index_observer, IndexTap) else None

    def _explain(self, reason: str) -> None:
        if reason not in self._explained:
            self._explained.add(reason)
            info(f"shard audit: not auditing the training loader: {reason}.")


def _epoch_audit(loader: ShardLoader, steps_before: int, recorded: bool = False) -> tuple[ShardAudit, int]:
    """An empty audit of the epoch in progress, and the samples consumed before this run resumed it.

    ``steps_before``: Lightning's step count in the epoch at this run's first step there. The rest of the
    epoch is sharded like a dataset of the remaining samples, which sets the padding allowed; the samples
    consumed before are allowed missing unless their record came with the checkpoint (``recorded``).
    """
    info = loader.sharding
    length = info.dataset_length or 0
    before = min(loader.standing(steps_before).samples, length)
    padding, missing = sharding_allowances(info, length - before)
    allowed_missing = missing if recorded else before + missing
    return ShardAudit(length, allowed_padding=padding, allowed_missing=allowed_missing), before
