"""``ShardStrategy``: Lightning's DDP with batch-level sharding, process-scaled schedulers and exact resume."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.strategies import _StrategyRegistry
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch.nn import Module
from torch.optim import Optimizer
from torch.utils.data import DataLoader
from typing_extensions import override

from lightning_shard.distributed import Topology
from lightning_shard.lightning._private import disable_sampler_injection
from lightning_shard.lightning.audit_callback import EpochAudit, ShardAuditCallback
from lightning_shard.lightning.callback import ShardEpochCallback
from lightning_shard.lightning.gather import gather_in_process_order, keep_first
from lightning_shard.lightning.loaders import (
    ShardLoader,
    flatten_loaders,
    is_shard_loader,
    prepare_for_stage,
    stage_defaults,
    stage_key,
)
from lightning_shard.lightning.optimizers import SchedulerScaling, wrap_optimizers, wrap_schedulers
from lightning_shard.lightning.plan import ShardPlan, plan_for
from lightning_shard.lightning.resume import bind_lightning_state
from lightning_shard.optim import ShardOptimizer
from lightning_shard.options import ShardOptions

_REGISTERED = (("shard", "popen"), ("shard_spawn", "spawn"))


class ShardStrategy(DDPStrategy):
    """DDP whose loaders are sharded by ``prepare_data_loader`` instead of Lightning's ``DistributedSampler``.

    Every train / val / test / predict ``DataLoader`` is sharded with this strategy's options (a
    ``ShardDataModule`` can override them per stage): training as configured, validation and test with
    ``even_batches=True`` (``gather_for_metrics`` drops the padding), predict with ``even_batches=False``
    so each sample is predicted exactly once. Optimizers become ``ShardOptimizer`` and
    ``interval="step"`` schedulers ``ShardScheduler``; the training loader's position is saved in
    Lightning's checkpoints and restored exactly.

    Args:
        split_batches, even_batches, dispatch_batches, put_on_device, rng_types, use_seedable_sampler,
            data_seed, non_blocking, use_stateful_dataloader, slice_fn_for_dispatch: the options of
            ``prepare_data_loader`` (``ShardOptions``); ``rng_types`` defaults to ``["generator"]``.
        step_scheduler_with_optimizer: step ``interval="step"`` schedulers ``N`` times per optimizer
            step (once with ``split_batches``); ``False`` steps them once, as Lightning does.
        audit: check every training epoch's samples (``ShardAuditCallback``): rank 0 logs the samples
            covered, the duplicates beyond the padding and the samples missing.
        audit_raise: with ``audit``, raise ``RuntimeError`` on every process after an epoch with a problem.
        **kwargs: any ``DDPStrategy`` argument (``find_unused_parameters``, ``timeout``, ``start_method``, ...).
            ``timeout`` (Lightning's default: 30 minutes) bounds how long a process waits for a peer that
            is alive but stuck, and also the start-up rendezvous; a killed peer ends the others at once
            on gloo (see ``benchmarks/RELIABILITY.md``).

    Raises:
        ValueError / TypeError: on inconsistent options (see ``ShardOptions``).
    """

    def __init__(
        self,
        *,
        split_batches: bool = False,
        even_batches: bool = True,
        dispatch_batches: bool | None = None,
        put_on_device: bool = False,
        rng_types: Sequence[str] | None = ("generator",),
        use_seedable_sampler: bool = False,
        data_seed: int | None = None,
        non_blocking: bool = False,
        use_stateful_dataloader: bool = False,
        slice_fn_for_dispatch: Callable[..., Any] | None = None,
        step_scheduler_with_optimizer: bool = True,
        audit: bool = False,
        audit_raise: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.options = ShardOptions(
            split_batches=split_batches,
            even_batches=even_batches,
            dispatch_batches=dispatch_batches,
            put_on_device=put_on_device,
            rng_types=None if rng_types is None else tuple(rng_types),
            use_seedable_sampler=use_seedable_sampler,
            data_seed=data_seed,
            non_blocking=non_blocking,
            use_stateful_dataloader=use_stateful_dataloader,
            slice_fn_for_dispatch=slice_fn_for_dispatch,
        )
        if not isinstance(step_scheduler_with_optimizer, bool):
            raise TypeError(
                f"`step_scheduler_with_optimizer` must be True or False, got {step_scheduler_with_optimizer!r}."
            )
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self._shard_plan: ShardPlan | None = None
        self._dataloader_idx = 0
        self._connected_trainer: pl.Trainer | None = None
        self._epoch_callback = ShardEpochCallback()
        self._audit_callback = _audit_callback(audit, audit_raise)

    # -- where we are -------------------------------------------------------------------------------
    @property
    def topology(self) -> Topology:
        """The data-parallel size and this process's index in it (the DDP world)."""
        return Topology(self.world_size, self.global_rank)

    @property
    def shard_plan(self) -> ShardPlan | None:
        """The plan of the running (or last) fit; ``None`` before a fit has started."""
        return self._shard_plan

    @property
    def scheduler_scaling(self) -> SchedulerScaling:
        """How ``interval="step"`` schedulers are stepped in this run."""
        return SchedulerScaling(
            enabled=self.step_scheduler_with_optimizer,
            split_batches=self.options_for("train").split_batches,
            num_processes=self.world_size,
        )

    @property
    def _trainer(self) -> pl.Trainer:
        if self._connected_trainer is None:
            raise RuntimeError(
                "`ShardStrategy` is not connected to a trainer yet; pass it to `Trainer(strategy=...)`."
            )
        return self._connected_trainer

    @property
    def audits(self) -> list[EpochAudit]:
        """The audit of each training epoch so far (with ``audit=True``; the same on every process)."""
        return [] if self._audit_callback is None else self._audit_callback.audits

    def options_for(self, stage: str) -> ShardOptions:
        """The options of ``stage``'s loaders: the strategy's, then the datamodule's overrides.

        Args:
            stage: ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``.
        """
        options = stage_defaults(self.options, stage)
        trainer = self._connected_trainer
        datamodule = getattr(trainer, "datamodule", None)
        overrides = getattr(datamodule, "shard_options", None)
        return options.replace(**overrides(stage)) if callable(overrides) else options

    # -- wiring into the trainer --------------------------------------------------------------------
    @override
    def connect(self, model: pl.LightningModule) -> None:
        super().connect(model)
        trainer = self._connected_trainer = model.trainer
        disable_sampler_injection(trainer)
        callbacks: list[Any] = getattr(trainer, "callbacks")  # noqa: B009 - set by a connector, unseen by mypy
        for callback in (self._epoch_callback, self._audit_callback):
            if callback is not None and callback not in callbacks:
                callbacks.append(callback)

    @override
    def process_dataloader(self, dataloader: object) -> object:
        if not isinstance(dataloader, DataLoader) or is_shard_loader(dataloader):
            return dataloader
        trainer = self._trainer
        stage = stage_key(trainer.state.stage)
        loader = prepare_for_stage(
            dataloader, self.options_for(stage), self.topology, stage, self.root_device
        )
        if stage == "train" and is_shard_loader(loader):
            loader.set_epoch(trainer.current_epoch)
            bind_lightning_state(loader, trainer, lambda: self._epoch_callback.reload_next_epoch(trainer))
            if self._audit_callback is not None:
                self._audit_callback.watch(loader)
        return loader

    @override
    def setup_optimizers(self, trainer: pl.Trainer) -> None:
        super().setup_optimizers(trainer)
        optimizers = wrap_optimizers(self.optimizers)
        self.lr_scheduler_configs = wrap_schedulers(
            self.lr_scheduler_configs, optimizers, self.scheduler_scaling
        )
        self.optimizers = optimizers

    @override
    def optimizer_step(
        self,
        optimizer: Optimizer,
        closure: Callable[[], Any],
        model: pl.LightningModule | Module | None = None,
        **kwargs: Any,
    ) -> Any:
        scaler = getattr(self.precision_plugin, "scaler", None)
        if isinstance(optimizer, ShardOptimizer) and isinstance(scaler, torch.amp.GradScaler):
            with optimizer.watch_scaler(scaler):
                return super().optimizer_step(optimizer, closure, model, **kwargs)
        return super().optimizer_step(optimizer, closure, model, **kwargs)

    @override
    def batch_to_device(self, batch: Any, device: torch.device | None = None, dataloader_idx: int = 0) -> Any:
        self._dataloader_idx = dataloader_idx
        return super().batch_to_device(batch, device, dataloader_idx)

    @override
    def on_train_start(self) -> None:
        super().on_train_start()
        trainer = self._trainer
        loaders = [loader for loader in flatten_loaders(trainer.train_dataloader) if is_shard_loader(loader)]
        if not loaders:
            return
        self._shard_plan = plan_for(
            loaders[0],
            self.scheduler_scaling,
            num_training_batches=trainer.num_training_batches,
            accumulate_grad_batches=trainer.accumulate_grad_batches,
        )
        rank_zero_info(str(self._shard_plan))

    # -- exact evaluation ---------------------------------------------------------------------------
    def gather_for_metrics(self, data: Any) -> Any:
        """``data`` of every process in process order, without the samples ``even_batches`` repeated.

        Call it once per batch in ``validation_step`` / ``test_step`` (every process must call it). The
        padding of the last batch is dropped, so gathering a 103-sample set yields exactly 103 rows.

        Raises:
            ValueError: if the current loader is uneven (``even_batches=False``) on several processes.
        """
        loader = self.current_loader()
        if loader is not None:
            _check_even(loader, self.world_size)
        gathered = gather_in_process_order(data)
        if loader is None or not loader.end_of_dataloader or loader.remainder <= 0:
            return gathered
        return keep_first(gathered, loader.remainder)

    def current_loader(self) -> ShardLoader | None:
        """The sharded loader whose batch is being processed (``None`` for a loader we did not shard)."""
        loaders = flatten_loaders(_stage_loaders(self._trainer))
        loader = loaders[self._dataloader_idx] if self._dataloader_idx < len(loaders) else None
        return loader if is_shard_loader(loader) else None

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: _StrategyRegistry) -> None:
        for name, start_method in _REGISTERED:
            if name not in strategy_registry:
                strategy_registry.register(
                    name,
                    cls,
                    description=f"lightning_shard's ShardStrategy with `start_method` '{start_method}'",
                    start_method=start_method,
                )


def _audit_callback(audit: bool, audit_raise: bool) -> ShardAuditCallback | None:
    for name, value in (("audit", audit), ("audit_raise", audit_raise)):
        if not isinstance(value, bool):
            raise TypeError(f"`{name}` must be True or False, got {value!r}.")
    if audit_raise and not audit:
        raise ValueError(
            "`audit_raise=True` raises when the shard audit finds a problem, but `audit=False` turns the "
            "audit off. Set `audit=True` as well, or leave `audit_raise=False`."
        )
    return ShardAuditCallback(raise_on_problem=audit_raise) if audit else None


def _stage_loaders(trainer: pl.Trainer) -> Any:
    stage = trainer.state.stage
    if stage == RunningStage.TRAINING:
        return trainer.train_dataloader
    if stage in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING):
        return trainer.val_dataloaders
    if stage == RunningStage.TESTING:
        return trainer.test_dataloaders
    return trainer.predict_dataloaders


def _check_even(loader: ShardLoader, world_size: int) -> None:
    if world_size > 1 and not loader.state_dict(steps=0)["even_batches"]:
        raise ValueError(
            "`gather_for_metrics` needs every process to run as many steps, but the current loader has "
            "`even_batches=False`, so a process could wait for the others forever. Keep `even_batches=True` "
            "for validation and test (the default); the padding is dropped when gathering."
        )
