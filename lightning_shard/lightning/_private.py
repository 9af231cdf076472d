"""The only places where the adapter touches private Lightning names, the loops' internals and the
trainer's state Lightning does not offer for changing, one function each, saying why no public hook
would do; ``tests/lightning/test_private.py`` fails as soon as a Lightning release changes one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.strategies.registry import _StrategyRegistry
from lightning.pytorch.callbacks import Callback, Checkpoint
from lightning.pytorch.overrides.distributed import _IndexBatchSamplerWrapper

from lightning_shard.lightning.compat import install_fix, supported_range

StrategyRegistryType = _StrategyRegistry
"""The class of Lightning's ``StrategyRegistry`` (``Strategy.register_strategies`` takes one), which
Lightning exports only under this private name."""


class RegisteredNames:
    """Registers a strategy (Lightning's or Fabric's) under each of its ``REGISTERED_NAMES`` not taken yet."""

    REGISTERED_NAMES: tuple[tuple[str, dict[str, Any]], ...] = ()
    """``(name, init_args)`` under which the strategy registers in Lightning's or Fabric's registry."""

    @classmethod
    def register_strategies(cls, strategy_registry: StrategyRegistryType) -> None:
        for name, init_args in cls.REGISTERED_NAMES:
            if name not in strategy_registry:
                description = f"lightning_shard's {cls.__name__} {init_args or ''}".strip()
                strategy_registry.register(name, cls, description=description, **init_args)


def disable_sampler_injection(trainer: pl.Trainer) -> None:
    """Keep Lightning from replacing the samplers of this trainer's loaders by ``DistributedSampler``
    (``RuntimeError`` if this Lightning release keeps the setting somewhere else)."""
    # NOTE: `_DataConnector._requires_distributed_sampler` reads `Trainer(use_distributed_sampler=...)` from
    # the private accelerator connector, before `Strategy.process_dataloader` sees the loader; no public
    # hook runs in between, and undoing the injection afterwards would lose the user's sampler.
    _accelerator_connector(trainer).use_distributed_sampler = False


def sampler_injection_enabled(trainer: pl.Trainer) -> bool:
    """Whether Lightning will inject ``DistributedSampler`` into this trainer's loaders."""
    # NOTE: the same private setting as in `disable_sampler_injection`; Lightning exposes no getter.
    return bool(_accelerator_connector(trainer).use_distributed_sampler)


def _accelerator_connector(trainer: pl.Trainer) -> Any:
    connector = getattr(trainer, "_accelerator_connector", None)
    if connector is None or not hasattr(connector, "use_distributed_sampler"):
        raise RuntimeError(
            f"This Lightning release ({pl.__version__}) keeps `use_distributed_sampler` in a place "
            "lightning_shard does not know, so it cannot turn off `DistributedSampler` injection. "
            f"Install a supported Lightning release ({supported_range()}): `{install_fix()}`, or report this "
            "at lightning_shard."
        )
    return connector


def unwrap_index_batch_sampler(batch_sampler: Any) -> Any | None:
    """The batch sampler inside the index recorder Lightning puts on predict loaders, or ``None``."""
    # NOTE: Lightning wraps a predict loader's batch sampler in `_IndexBatchSamplerWrapper` so that its
    # prediction writers get `batch_indices`; we shard what is inside, then record the shard (below).
    return batch_sampler._batch_sampler if isinstance(batch_sampler, _IndexBatchSamplerWrapper) else None


def record_batch_indices(batch_sampler: Any) -> Any:
    """``batch_sampler`` wrapped so that Lightning's prediction loop finds the indices it yields."""
    # NOTE: `PredictionLoop._get_batch_indices` looks for exactly this class on `dataloader.batch_sampler`.
    return _IndexBatchSamplerWrapper(batch_sampler)


def checkpoint_loader_states(trainer: pl.Trainer) -> list[Any]:
    """The training loader states Lightning is about to load from a checkpoint (empty when not restoring)."""
    # NOTE: `_FitLoop.setup_data` measures the training loaders before it loads their states (a state from
    # fewer processes has more steps left); they wait in this attribute, and no public hook runs between.
    loop = trainer.fit_loop
    return list(getattr(loop, "_combined_loader_states_to_load", None) or []) if loop.restarting else []


def saved_loader_states(checkpoint: dict[str, Any]) -> list[Any]:
    """The training loaders' states in a loaded checkpoint (empty when it has none)."""
    # NOTE: `_FitLoop.on_save_checkpoint` keeps them in its own state under "combined_loader", nested by
    # `Trainer.save_checkpoint` under "loops"; Lightning documents neither, and offers no reader.
    return list(_fit_loop_state(checkpoint).get("combined_loader", []))


def remove_saved_loader_states(checkpoint: dict[str, Any]) -> None:
    """Remove the training loaders' states from a loaded checkpoint, as Lightning writes one without any."""
    _fit_loop_state(checkpoint).pop("combined_loader", None)


def _fit_loop_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    state = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
    return state if isinstance(state, dict) else {}


def saved_callback_states(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The callbacks' states in a checkpoint dict Lightning dumped or read, by ``Callback.state_key`` (the
    checkpoint's own dict, so an entry replaced in it is what the callback restores; empty when it has none)."""
    # NOTE: the key is public in Lightning's checkpoint format; the adapter reads no other trainer setting
    # of that name, which the guard of this module holds to `_private.py`. A strategy holds the dict between
    # the dump and the write and between the read and the restore (`ShardingHooks`: each process's random
    # states); no public call names a callback's entry.
    states = checkpoint.get("callbacks")
    return states if isinstance(states, dict) else {}


def rebuild_unrestored_training_loaders(trainer: pl.Trainer) -> bool:
    """Build the training loaders again when they were built before the fit loop was restored, so that
    the checkpoint's loader states are loaded; return whether they were rebuilt.

    Reading ``trainer.estimated_stepping_batches`` in ``configure_optimizers`` builds them that early;
    ``_FitLoop.setup_data`` then returns early and never loads the states: the epoch would start over.
    """
    # NOTE: no public hook runs between the restore and the first epoch, and no public call rebuilds the
    # loaders: `setup_data` rebuilds only when `_combined_loader` is unset.
    loop = trainer.fit_loop
    if not checkpoint_loader_states(trainer) or loop._combined_loader is None:
        return False
    if loop._data_fetcher is not None:
        loop._data_fetcher.teardown()
    loop._combined_loader = None
    loop.setup_data()
    return True


def finish_restored_epoch(trainer: pl.Trainer) -> bool:
    """When the checkpoint was written on an epoch's last training batch and the loaders now count that
    epoch in other steps (another number of processes), have Lightning start the next epoch afresh.

    Lightning compares the batches completed with the *new* loaders' length: on fewer processes it would
    resume the next epoch at the old count's batch index.
    """
    # NOTE: `_TrainingEpochLoop.reset` adds one to `current.completed` and resets the epoch's counters
    # when it reaches `num_training_batches`; the saved `is_last_batch` says the epoch was complete.
    loop = trainer.fit_loop.epoch_loop
    progress = loop.batch_progress
    total = trainer.num_training_batches
    if not trainer.fit_loop.restarting or not progress.is_last_batch or not loop.restarted_on_train_batch_end:
        return False
    if total == float("inf") or progress.current.completed + 1 >= total:
        return False
    progress.current.completed = int(total) - 1
    return True


def add_callbacks_before_checkpoints(trainer: pl.Trainer, callbacks: Sequence[Callback]) -> None:
    """Add each of ``callbacks`` that ``trainer`` lacks, in order, before its first ``Checkpoint``.

    Lightning has no public way for a strategy to add callbacks (``Trainer(callbacks=...)`` and
    ``configure_callbacks`` are the user's); every hook runs through the list ``trainer.callbacks``.
    """
    # NOTE: before the checkpoint callbacks, as Lightning orders them: a checkpoint written at a step's end
    # must see what this step recorded (the audit), as one written at an epoch's start the epoch.
    existing: list[Callback] = getattr(trainer, "callbacks")  # noqa: B009 - set by a connector, unseen by mypy
    first = next((i for i, c in enumerate(existing) if isinstance(c, Checkpoint)), len(existing))
    for callback in reversed(callbacks):
        if callback not in existing:
            existing.insert(first, callback)


def training_batches_ready(trainer: pl.Trainer) -> tuple[int, bool]:
    """The training batches of the epoch Lightning counts as ready, and whether the last was the epoch's last."""
    # NOTE: the fit loop's progress counters, which Lightning saves and restores; no public property has them.
    progress = trainer.fit_loop.epoch_loop.batch_progress
    return progress.current.ready, progress.is_last_batch


_RELOAD = "reload_dataloaders_every_n_epochs"


def reload_every_n_epochs(trainer: pl.Trainer) -> int:
    """``trainer``'s ``reload_dataloaders_every_n_epochs``, as its loops read it now."""
    return int(getattr(trainer, _RELOAD))


def set_reload_every_n_epochs(trainer: pl.Trainer, epochs: int) -> None:
    """Change ``reload_dataloaders_every_n_epochs`` during a fit (1: rebuild the loaders at the next epoch)."""
    # NOTE: the `Trainer` argument is kept as a plain attribute (set by the data connector) that the fit loop
    # reads at each epoch's start; Lightning has no public way to ask for one reload.
    setattr(trainer, _RELOAD, epochs)


def predictions_per_loader(trainer: pl.Trainer) -> list[list[Any]] | None:
    """This process's predictions so far, one list per predict loader, the very lists ``trainer.predict``
    returns; ``None`` with ``return_predictions=False``."""
    # NOTE: the prediction loop keeps them per loader but hands a single loader's list out alone.
    loop = trainer.predict_loop
    if not loop.return_predictions:
        return None
    predictions = loop.predictions
    return predictions if loop.num_dataloaders > 1 else [predictions]


def predict_loader_count(trainer: pl.Trainer) -> int:
    """The number of loaders the running ``trainer.predict`` iterates."""
    return trainer.predict_loop.num_dataloaders
