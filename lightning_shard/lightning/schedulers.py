"""Optimizers and LR schedulers wrapped after Lightning has built them from ``configure_optimizers``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from lightning.pytorch.utilities.types import LRSchedulerConfig
from torch.optim import Optimizer

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
    return [
        optimizer if isinstance(optimizer, ShardOptimizer) else ShardOptimizer(optimizer)
        for optimizer in optimizers
    ]


def wrap_schedulers(
    configs: list[LRSchedulerConfig], optimizers: list[Optimizer], scaling: SchedulerScaling
) -> list[LRSchedulerConfig]:
    """``configs`` with each ``interval="step"`` scheduler in a ``ShardScheduler``.

    ``interval="epoch"`` schedulers and ``ReduceLROnPlateau`` keep stepping once per epoch / monitored
    value, unscaled; so does everything when ``scaling`` is disabled.
    """
    return [_wrapped(config, optimizers, scaling) for config in configs]


def _wrapped(
    config: LRSchedulerConfig, optimizers: list[Optimizer], scaling: SchedulerScaling
) -> LRSchedulerConfig:
    scheduler = config.scheduler
    if not scaling.enabled or config.interval != "step" or config.reduce_on_plateau:
        return config
    if isinstance(scheduler, ShardScheduler):
        return config
    wrapped = ShardScheduler(
        scheduler,
        _followed(scheduler, optimizers),
        step_with_optimizer=True,
        split_batches=scaling.split_batches,
        num_processes=scaling.num_processes,
    )
    return replace(config, scheduler=wrapped)  # type: ignore[arg-type]


def _followed(scheduler: object, optimizers: list[Optimizer]) -> list[Optimizer]:
    """The wrapped optimizers ``scheduler`` follows (all of them when it does not say)."""
    inner = getattr(scheduler, "optimizer", None)
    followed = [opt for opt in optimizers if getattr(opt, "optimizer", opt) is inner]
    return followed or list(optimizers)
