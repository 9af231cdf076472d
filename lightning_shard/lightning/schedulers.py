"""Optimizers and LR schedulers wrapped after Lightning has built them from ``configure_optimizers``."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import lightning.pytorch as pl
from lightning.pytorch.utilities.types import LRSchedulerConfig
from torch.optim import Optimizer

from lightning_shard.log import warn
from lightning_shard.optim import ShardOptimizer, ShardScheduler


@dataclass(frozen=True)
class SchedulerScaling:
    """How ``interval="step"`` schedulers are stepped: ``factor`` inner steps per optimizer step."""

    enabled: bool
    split_batches: bool
    num_processes: int

    @property
    def factor(self) -> int:
        """Inner scheduler steps per optimizer step."""
        return self.num_processes if self.enabled and not self.split_batches else 1

    def describe(self) -> str:
        """A few words for the plan line."""
        if not self.enabled:
            return "step schedulers unscaled (step_scheduler_with_optimizer=False)"
        if self.split_batches:
            return "step schedulers x1 per optimizer step (split_batches)"
        return f"step schedulers x{self.factor} per optimizer step"


def wrap_optimizers(optimizers: list[Optimizer]) -> list[Optimizer]:
    """Each optimizer as a ``ShardOptimizer`` (one already wrapped is kept)."""
    return [opt if isinstance(opt, ShardOptimizer) else ShardOptimizer(opt) for opt in optimizers]


def wrap_schedulers(
    configs: list[LRSchedulerConfig], optimizers: list[Optimizer], scaling: SchedulerScaling
) -> list[LRSchedulerConfig]:
    """``configs`` with each ``interval="step"`` scheduler in a ``ShardScheduler`` (unless ``scaling`` is
    disabled); ``interval="epoch"`` schedulers and ``ReduceLROnPlateau`` keep theirs, unscaled."""
    return [_wrapped(config, optimizers, scaling) for config in configs]


def has_step_schedulers(configs: list[LRSchedulerConfig]) -> bool:
    """Whether any of ``configs`` steps per optimizer step, the kind ``SchedulerScaling`` applies to."""
    return any(_steps_per_batch(config) for config in configs)


def _steps_per_batch(config: LRSchedulerConfig) -> bool:
    return config.interval == "step" and not config.reduce_on_plateau


def _wrapped(
    config: LRSchedulerConfig, optimizers: list[Optimizer], scaling: SchedulerScaling
) -> LRSchedulerConfig:
    scheduler = config.scheduler
    if not scaling.enabled or not _steps_per_batch(config) or isinstance(scheduler, ShardScheduler):
        return config
    # NOTE: the wrapped optimizers the scheduler follows (all of them when it does not say).
    inner = getattr(scheduler, "optimizer", None)
    followed = [opt for opt in optimizers if getattr(opt, "optimizer", opt) is inner]
    wrapped = ShardScheduler(
        scheduler,
        followed or list(optimizers),
        split_batches=scaling.split_batches,
        num_processes=scaling.num_processes,
    )
    return replace(config, scheduler=wrapped)  # type: ignore[arg-type]


_HORIZONS = {"OneCycleLR": "total_steps", "CosineAnnealingLR": "T_max", "PolynomialLR": "total_iters"}
"""Schedulers whose schedule ends (or turns back) after a number of steps, and where they keep it."""


def scheduler_horizon(scheduler: object) -> int | None:
    """After how many steps ``scheduler``'s schedule ends, if it is one that says."""
    inner = getattr(scheduler, "scheduler", scheduler)
    attribute = _HORIZONS.get(type(inner).__name__)
    value = getattr(inner, attribute, None) if attribute else None
    return int(value) if isinstance(value, int) else None


def short_schedulers(
    trainer: pl.Trainer, configs: list[LRSchedulerConfig], scaling: SchedulerScaling
) -> list[str]:
    """The step schedulers that this fit will step past the end of their schedule, each described
    (``"OneCycleLR ends after 10 of 40 scheduler steps"``: a scaled scheduler steps ``scaling.factor``
    times per optimizer step, which ``estimated_stepping_batches`` counts)."""
    total = trainer.estimated_stepping_batches
    if math.isinf(total):
        return []
    scaled = int(total) * scaling.factor
    short = []
    for config in configs:
        horizon = scheduler_horizon(config.scheduler)
        if config.interval == "step" and horizon is not None and horizon < scaled:
            inner = getattr(config.scheduler, "scheduler", config.scheduler)
            short.append(f"{type(inner).__name__} ends after {horizon} of {scaled} scheduler steps")
    return short


def warn_short_schedulers(short: list[str]) -> None:
    """Say once, on rank 0, which schedules end early and the one-liner that sizes them."""
    for schedule in short:
        warn(
            f"lightning_shard: the step scheduler {schedule} this fit takes: it steps once per "
            "process per optimizer step, but `trainer.estimated_stepping_batches` counts optimizer steps, so "
            "the schedule ends early and stays at its end. Size it with "
            "`total_steps=self.trainer.strategy.estimated_scheduler_steps` (or "
            "`ShardDataModule.scheduler_steps_per_epoch * max_epochs`), or pass "
            "`step_scheduler_with_optimizer=False` to step it once per optimizer step."
        )
