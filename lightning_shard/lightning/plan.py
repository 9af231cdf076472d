"""The sharding plan of a fit: what rank 0 logs at fit start, and ``ShardStrategy.shard_plan``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lightning.fabric.utilities.data import sized_len

from lightning_shard.lightning.schedulers import SchedulerScaling
from lightning_shard.lightning.stages import ShardLoader
from lightning_shard.sampling.balance import is_balanced
from lightning_shard.sampling.samplers import ScalableRandomSampler


@dataclass(frozen=True)
class ShardPlan:
    """How one training epoch is sharded.

    Attributes:
        num_processes: data-parallel processes ``N``.
        process_batch_size: samples per step on each process.
        global_batch_size: samples per step on all processes together.
        batches_per_epoch: batches each process yields in a whole epoch (``None``: unsized data).
        steps_per_epoch: optimizer steps per epoch, after ``limit_train_batches`` and
            ``accumulate_grad_batches`` (``None``: unsized data).
        dataset_length: samples in the dataset (``None``: unsized).
        padded_samples: duplicates added so the last step is full on every process, in (what is left of)
            the epoch the fit starts in.
        dropped_samples: samples left out because of ``drop_last=True`` (the same epoch).
        scheduler_scaling: how ``interval="step"`` schedulers are stepped (empty: the fit has none).
        short_schedulers: step schedulers whose schedule ends before the fit stops stepping them.
        mode: ``"shard"`` (each process loads its part) or ``"dispatch"`` (process 0 loads).
        stream: how an iterable dataset is split and how uneven ends are handled (``None``: map-style).
        scalable_shuffle: whether the order is ``scalable_shuffle``'s keyed permutation.
        accumulate_grad_batches: batches whose gradients each optimizer step sums. Lightning saves no
            accumulated gradient, so only a checkpoint written at an optimizer step resumes bit for bit.
        split_batches: whether each batch of the loader is split among the processes.
        ranks: the processes of the job when more than ``num_processes`` (tensor-parallel peers).
        resumed_at: the optimizer step of the epoch the fit resumed at (``None``: the epoch starts).
        pipeline: the torchdata.nodes graph the loader shards through its root (``None``: a ``DataLoader``).
        left_as_it_is: the training iterables left as they are, each with why.
    """

    num_processes: int
    process_batch_size: int | None
    global_batch_size: int
    batches_per_epoch: int | None
    steps_per_epoch: int | None
    dataset_length: int | None
    padded_samples: int | None
    dropped_samples: int | None
    scheduler_scaling: str
    mode: str
    short_schedulers: tuple[str, ...] = ()
    stream: str | None = None
    scalable_shuffle: bool = False
    accumulate_grad_batches: int = 1
    split_batches: bool = False
    ranks: int | None = None
    resumed_at: int | None = None
    pipeline: str | None = None
    left_as_it_is: tuple[str, ...] = ()

    def __str__(self) -> str:
        steps = "an unknown number of" if self.steps_per_epoch is None else str(self.steps_per_epoch)
        sizes = (
            f"batch size {self.process_batch_size} per process and {self.global_batch_size} global"
            if self.global_batch_size
            else "batch sizes of the user's batch sampler"
        )
        line = (
            f"lightning_shard plan: {_processes(self.num_processes, self.ranks)} "
            f"({self.mode}{', split' if self.split_batches else ''}), {sizes}, {steps} optimizer steps per "
            "epoch"
        )
        if self.resumed_at is not None:
            line += f" (resumed at step {self.resumed_at}"
            if self.steps_per_epoch is not None:
                line += f": {self.steps_per_epoch - self.resumed_at} steps left"
            line += ")"
        if self.padded_samples is not None or not self.stream:
            padded = "unknown" if self.padded_samples is None else str(self.padded_samples)
            line += f", {padded} samples padded in the last step"
        if self.dropped_samples:
            line += f", {self.dropped_samples} dropped (drop_last)"
        if self.scheduler_scaling:
            line += f", {self.scheduler_scaling}"
        line += "".join(f" (WARNING: {short}: it ends early)" for short in self.short_schedulers)
        if self.stream:
            line += f"; stream: {self.stream}"
        if self.pipeline:
            line += f"; torchdata.nodes `{self.pipeline}`, sharded through its root"
        line += "".join(f"; left as it is: {left}" for left in self.left_as_it_is)
        if self.scalable_shuffle:
            line += "; scalable shuffle: keyed order of (data_seed, epoch), not RandomSampler's"
        if self.accumulate_grad_batches > 1:
            line += (
                f"; {self.accumulate_grad_batches} batches accumulated per optimizer step: a checkpoint "
                "resumes bit for bit only at an optimizer step (Lightning saves no accumulated gradient)"
            )
        return line


def plan_for(
    loader: ShardLoader,
    scaling: SchedulerScaling,
    *,
    num_training_batches: float,
    accumulate_grad_batches: int,
    short_schedulers: Sequence[str] = (),
    step_schedulers: bool = True,
    ranks: int | None = None,
    resumed_batches: int = 0,
    left_as_it_is: tuple[str, ...] = (),
) -> ShardPlan:
    """The plan of ``loader`` for a fit that runs ``num_training_batches`` batches per epoch.

    ``step_schedulers``: whether the fit has a scheduler ``scaling`` applies to. ``ranks``: the job's
    processes. ``resumed_batches``: the batches of the epoch a checkpoint's loader state had consumed.
    """
    state = loader.sharding
    batches = sized_len(loader)
    padded, dropped = _padding(loader, batches)
    unbounded = math.isinf(num_training_batches)
    steps = None if unbounded else math.ceil(num_training_batches / accumulate_grad_batches)
    per_process = state.batch_size
    if state.split_batches and per_process is not None:
        per_process //= state.num_processes
    return ShardPlan(
        num_processes=state.num_processes,
        process_batch_size=per_process,
        global_batch_size=loader.total_batch_size,
        batches_per_epoch=batches,
        steps_per_epoch=steps,
        dataset_length=state.dataset_length,
        padded_samples=padded,
        dropped_samples=dropped,
        scheduler_scaling=scaling.describe() if step_schedulers else "",
        mode=state.mode,
        short_schedulers=tuple(short_schedulers),
        stream=loader.kind.describe(),
        scalable_shuffle=state.sampler == ScalableRandomSampler.__name__,
        accumulate_grad_batches=accumulate_grad_batches,
        split_batches=state.split_batches,
        ranks=ranks if ranks != state.num_processes else None,
        resumed_at=resumed_batches // accumulate_grad_batches if resumed_batches else None,
        pipeline=None if loader.kind.pipeline is None else loader.kind.pipeline.describe(),
        left_as_it_is=left_as_it_is,
    )


def left_alone_plan(num_processes: int, left: tuple[str, ...]) -> str:
    """The plan line of a fit whose training iterables are all left as they are."""
    items = "; ".join(f"left as it is: {item}" for item in left)
    return f"lightning_shard plan: {_processes(num_processes)}; {items}"


def _processes(count: int, ranks: int | None = None) -> str:
    """``2 processes``, or ``2 data-parallel processes of 4 ranks`` when tensor-parallel peers share batches."""
    noun = "process" if count == 1 else "processes"
    return f"{count} {noun}" if ranks is None else f"{count} data-parallel {noun} of {ranks} ranks"


def _padding(loader: ShardLoader, batches: int | None) -> tuple[int | None, int | None]:
    """(padded, dropped) samples of the epoch the fit starts in; ``None`` when the lengths are unknown.

    NOTE: after an elastic resume only the steps left run at this global batch, over the samples left.
    """
    state, global_batch = loader.sharding, loader.total_batch_size
    if batches is None or state.dataset_length is None or not global_batch:
        return None, None  # NOTE: a batch sampler without `batch_size` (max tokens): sizes vary, no count.
    # NOTE: where the epoch the fit starts in stands: a checkpoint's restore, the epoch in progress, or none.
    at = loader.standing()
    left = max(state.dataset_length - at.samples_before_resume, 0)
    covered = (batches - at.steps_before_resume) * global_batch
    if state.drop_last:
        return 0, max(left - covered, 0)
    if not state.even_batches or (
        state.mode == "shard" and is_balanced(state.even_batches, state.dataset_length, state.num_processes)
    ):
        return 0, 0
    if state.mode == "dispatch":
        # NOTE: a dispatched last global batch is completed to the next multiple of `N` rows.
        return -(left % global_batch) % state.num_processes, 0
    return max(covered - left, 0), 0
