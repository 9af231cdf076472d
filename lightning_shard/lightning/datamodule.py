"""``ShardDataModule``: per-stage sharding options, and the sizes users need to build schedulers."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.data import sized_len
from lightning.pytorch.strategies import ParallelStrategy

from lightning_shard.comm.topology import Topology
from lightning_shard.lightning._private import sampler_injection_enabled
from lightning_shard.lightning.stages import STAGES, stage_defaults
from lightning_shard.lightning.strategy import ShardingHooks
from lightning_shard.loaders.kinds import is_data_loader, user_batch_size
from lightning_shard.options import ShardOptions, check_known
from lightning_shard.prepare import prepare_with_options


class ShardDataModule(pl.LightningDataModule):
    """A ``LightningDataModule`` whose loaders ``ShardStrategy`` shards with per-stage options.

    Set ``shard_stage_options`` (or override ``shard_options``) to change the strategy's options for
    one stage, e.g. ``{"train": {"split_batches": True}}``. Inside ``configure_optimizers``,
    ``num_processes``, ``global_batch_size``, ``steps_per_epoch`` and ``scheduler_steps_per_epoch`` give
    the sizes of the sharded run, e.g. to build a ``OneCycleLR``.

    Used with another multi-process strategy (e.g. ``DDPStrategy``) it raises when attached to the
    trainer, instead of letting Lightning shard its loaders differently.
    """

    shard_stage_options: ClassVar[Mapping[str, Mapping[str, Any]]] = MappingProxyType({})
    """Per-stage overrides of the strategy's options; keys ``"train"``, ``"validate"``, ``"test"``, ``"predict"``."""

    _shard_trainer: pl.Trainer | None = None

    def shard_options(self, stage: str) -> dict[str, Any]:
        """The options that ``stage``'s loaders use instead of the strategy's.

        Raises:
            ValueError: on an unknown ``stage``.
        """
        if stage not in STAGES:
            raise ValueError(f"`stage` must be one of {list(STAGES)}, got {stage!r}.")
        check_stage_options(self.shard_stage_options)
        return dict(self.shard_stage_options.get(stage, {}))

    @property
    def trainer(self) -> pl.Trainer | None:
        return self._shard_trainer

    @trainer.setter
    def trainer(self, trainer: pl.Trainer | None) -> None:
        if trainer is not None:
            check_stage_options(self.shard_stage_options)
            _check_strategy(trainer)
        self._shard_trainer = trainer

    # -- sizes ------------------------------------------------------------------------------------
    @property
    def num_processes(self) -> int:
        """Data-parallel processes ``N`` (1 without a trainer)."""
        return self._topology().num_processes

    @property
    def global_batch_size(self) -> int:
        """Samples per step on all processes: ``B * N``, or ``B`` with ``split_batches`` (``B * N`` again
        when ``Trainer(use_distributed_sampler=False)`` leaves the loaders whole on every process).

        Raises:
            ValueError: if the training loader has no batch size.
        """
        batch_size = user_batch_size(self.train_dataloader())
        if batch_size is None:
            raise ValueError(
                "`global_batch_size` needs the training loader's batch size, but it has none "
                "(`batch_size=None`). Give `DataLoader` a `batch_size` or a batch sampler with one."
            )
        split = self._train_options().split_batches and not self._loaders_left_alone()
        return batch_size if split else batch_size * self.num_processes

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per training epoch on each process, after ``limit_train_batches`` and
        ``accumulate_grad_batches``.

        Raises:
            ValueError: if the training data has no length.
        """
        loader = self.train_dataloader()
        if not is_data_loader(loader):
            raise ValueError(
                f"`steps_per_epoch` needs `train_dataloader()` to return one `DataLoader`, got "
                f"{type(loader).__name__}. Compute the steps from your loaders yourself."
            )
        if self._loaders_left_alone():
            batches = sized_len(loader)
        else:
            # NOTE: preparing a loader may draw a seed from the global RNG; keep the user's stream as it is.
            with torch.random.fork_rng(devices=[]):
                batches = sized_len(prepare_with_options(loader, self._train_options(), self._topology()))
        if batches is None:
            raise ValueError(
                "`steps_per_epoch` needs a training dataset with a length; this one is an iterable without "
                "`__len__`. Set `max_steps` and size the scheduler from it instead."
            )
        limit: int | float = 1.0 if self.trainer is None else self.trainer.limit_train_batches
        batches = min(batches, limit) if isinstance(limit, int) else int(batches * limit)
        accumulate = 1 if self.trainer is None else self.trainer.accumulate_grad_batches
        return math.ceil(batches / accumulate)

    @property
    def scheduler_steps_per_epoch(self) -> int:
        """How far an ``interval="step"`` scheduler advances per epoch under ``ShardStrategy``: the
        ``total_steps`` of a one-epoch ``OneCycleLR``."""
        strategy = self._shard_strategy()
        factor = 1 if strategy is None else strategy.scheduler_scaling.factor
        return self.steps_per_epoch * factor

    def _shard_strategy(self) -> ShardingHooks | None:
        strategy = None if self.trainer is None else self.trainer.strategy
        return strategy if isinstance(strategy, ShardingHooks) else None

    def _train_options(self) -> ShardOptions:
        strategy = self._shard_strategy()
        if strategy is not None:
            return strategy.options_for("train")
        return stage_defaults(ShardOptions(), "train").replace(**self.shard_options("train"))

    def _loaders_left_alone(self) -> bool:
        """Whether the strategy leaves the loaders as they are (``Trainer(use_distributed_sampler=False)``)."""
        strategy = self._shard_strategy()
        if strategy is None or self.trainer is None:
            return False
        # NOTE: the strategy reads the setting when a fit connects it to the model (and then turns it off);
        # before that, the trainer still holds the user's.
        if strategy.lightning_module is not None:
            return strategy.loaders_left_alone
        return not sampler_injection_enabled(self.trainer)

    def _topology(self) -> Topology:
        strategy, trainer = self._shard_strategy(), self.trainer
        if strategy is not None:
            return strategy.topology
        return Topology(1, 0) if trainer is None else Topology(trainer.world_size, trainer.global_rank)


def check_stage_options(stage_options: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse a ``shard_stage_options`` whose stage keys (``ValueError``) or option names (``TypeError``)
    are unknown, naming the closest known one."""
    for stage, overrides in stage_options.items():
        if stage not in STAGES:
            close = difflib.get_close_matches(str(stage), STAGES, n=1, cutoff=0.0)
            raise ValueError(
                f"`shard_stage_options` has the key {stage!r}, which is not a stage; its options would be "
                f"ignored. The keys are {list(STAGES)}: did you mean {close[0]!r}?"
            )
        check_known(ShardOptions, overrides, f"shard_stage_options[{stage!r}]")


def _check_strategy(trainer: pl.Trainer) -> None:
    strategy, processes = trainer.strategy, trainer.num_devices * trainer.num_nodes
    if isinstance(strategy, ShardingHooks) or not isinstance(strategy, ParallelStrategy) or processes <= 1:
        return
    consequence = (
        "Lightning would shard its loaders with `DistributedSampler` and ignore this datamodule's options"
        if sampler_injection_enabled(trainer)
        else "nothing would shard its loaders (`use_distributed_sampler=False`), so every process would see every sample"
    )
    raise ValueError(
        f"`ShardDataModule` needs `ShardStrategy` to shard its loaders, but the trainer uses "
        f"`{type(strategy).__name__}` on {processes} processes: {consequence}. "
        "Use `Trainer(strategy='shard')` (or `strategy=ShardStrategy(...)`)."
    )
