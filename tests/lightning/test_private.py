"""Guards for the private Lightning names in ``lightning_shard/lightning/_private.py``, and for the
Lightning behaviour the adapter relies on: these fail as soon as a Lightning release changes them."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import SingleDeviceStrategy
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.data import _update_dataloader
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler
from torchdata.stateful_dataloader import StatefulDataLoader

import lightning_shard.lightning
from lightning_shard.lightning._private import (
    StrategyRegistryType,
    add_callbacks_before_checkpoints,
    disable_sampler_injection,
    finish_restored_epoch,
    predict_loader_count,
    predictions_per_loader,
    rebuild_unrestored_training_loaders,
    record_batch_indices,
    reload_every_n_epochs,
    remove_saved_loader_states,
    sampler_injection_enabled,
    saved_callback_states,
    saved_loader_states,
    set_reload_every_n_epochs,
    training_batches_ready,
    unwrap_index_batch_sampler,
)
from tests.helpers.lightning_app import Recorder, RecordMap, loader


def _trainer() -> pl.Trainer:
    return pl.Trainer(strategy="ddp", devices=2, accelerator="cpu", logger=False)


def test_sampler_injection_is_turned_off_where_lightning_decides_it() -> None:
    trainer = _trainer()
    loader = DataLoader(range(10), batch_size=2)
    assert sampler_injection_enabled(trainer)
    assert trainer._data_connector._requires_distributed_sampler(loader)
    disable_sampler_injection(trainer)
    assert not sampler_injection_enabled(trainer)
    assert not trainer._data_connector._requires_distributed_sampler(loader)


def test_predict_loaders_carry_lightnings_index_recorder() -> None:
    loader = DataLoader(range(10), batch_size=4)
    prepared = _update_dataloader(loader, loader.sampler, mode=RunningStage.PREDICTING)
    inner = unwrap_index_batch_sampler(prepared.batch_sampler)
    assert isinstance(inner, BatchSampler) and inner.batch_size == 4
    assert unwrap_index_batch_sampler(loader.batch_sampler) is None


def test_prediction_loop_reads_the_recorded_indices() -> None:
    recorder = record_batch_indices(BatchSampler(SequentialSampler(range(4)), 2, drop_last=False))
    assert list(recorder) == [[0, 1], [2, 3]]
    found = _trainer().predict_loop._get_batch_indices(SimpleNamespace(batch_sampler=recorder))
    assert found == [[0, 1], [2, 3]]


def test_progress_counters_the_checkpoint_state_reads() -> None:
    trainer = _trainer()
    assert training_batches_ready(trainer) == (0, False)
    progress = trainer.fit_loop.epoch_loop.batch_progress
    progress.current.ready, progress.is_last_batch = 3, True
    assert training_batches_ready(trainer) == (3, True)


def _settings(tmp_path: Path, **more: Any) -> dict[str, Any]:
    settings = {"accelerator": "cpu", "devices": 1, "logger": False, "enable_progress_bar": False}
    return settings | {"enable_model_summary": False, "default_root_dir": str(tmp_path)} | more


class _Marker(pl.Callback):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.seen.append("batch end")


def test_callbacks_added_to_the_list_run_before_the_checkpoints(tmp_path: Path) -> None:
    """What ``add_callbacks_before_checkpoints`` relies on: every hook runs through ``trainer.callbacks`` in
    its order, also for a callback added after the trainer was built (as a strategy's ``connect`` does)."""
    save = ModelCheckpoint(tmp_path / "checkpoints", every_n_train_steps=1)
    trainer = pl.Trainer(max_steps=2, callbacks=[save], **_settings(tmp_path))
    first, second = _Marker(), _Marker()
    add_callbacks_before_checkpoints(trainer, [first, second])
    add_callbacks_before_checkpoints(trainer, [first])
    assert (
        trainer.callbacks.index(first) + 1 == trainer.callbacks.index(second) < trainer.callbacks.index(save)
    )
    trainer.fit(Recorder(str(tmp_path)), loader(8, 2))
    assert first.seen == second.seen == ["batch end"] * 2
    assert trainer.callbacks.index(second) < trainer.callbacks.index(save), "Lightning kept the order"


class _Counting(pl.Callback):
    def __init__(self) -> None:
        self.loaded: list[Any] = []

    @property
    def state_key(self) -> str:
        return "counting"

    def state_dict(self) -> dict[str, Any]:
        return {"count": 1}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loaded.append(state_dict)


class _Replacing(SingleDeviceStrategy):
    """Has the callback restore another state than the saved one, as ``ShardingHooks.load_checkpoint`` does."""

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        checkpoint = super().load_checkpoint(checkpoint_path)
        assert saved_callback_states(checkpoint)["counting"] == {"count": 1}
        saved_callback_states(checkpoint)["counting"] = {"count": 2}
        return checkpoint


def test_a_strategy_finds_and_replaces_a_callbacks_state_in_the_checkpoint(tmp_path: Path) -> None:
    """What the random states rely on: a callback's state is the entry ``saved_callback_states`` finds,
    in the dict a strategy writes, and the entry a strategy replaces is what the callback restores."""
    trainer = pl.Trainer(max_steps=1, callbacks=[_Counting()], **_settings(tmp_path))
    trainer.fit(Recorder(str(tmp_path)), loader(8, 2))
    trainer.save_checkpoint(tmp_path / "saved.ckpt")
    saved = torch.load(tmp_path / "saved.ckpt", weights_only=True)
    assert saved_callback_states(saved)["counting"] == {"count": 1}
    assert saved_callback_states({}) == {}
    counting, strategy = _Counting(), _Replacing(device=torch.device("cpu"))
    resumed = pl.Trainer(max_steps=2, callbacks=[counting], strategy=strategy, **_settings(tmp_path))
    resumed.fit(Recorder(str(tmp_path)), loader(8, 2), ckpt_path=str(tmp_path / "saved.ckpt"))
    assert counting.loaded == [{"count": 2}]


class _CountingBatches(pl.Callback):
    def __init__(self) -> None:
        self.batches = 0

    @property
    def state_key(self) -> str:
        return "counting"

    def on_train_batch_end(self, *args: Any) -> None:
        self.batches += 1

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}


def test_where_a_checkpoint_keeps_loader_and_callback_states(tmp_path: Path) -> None:
    """What ``to_plain_checkpoint`` relies on: Lightning keeps a stateful training loader's state where
    ``saved_loader_states`` reads it, refuses it with a plain loader (the message the Troubleshooting page
    quotes), and resumes once ``remove_saved_loader_states`` removed it; callbacks' states by their key."""
    save = ModelCheckpoint(tmp_path / "checkpoints", every_n_train_steps=2, filename="saved")
    stateful = StatefulDataLoader(RecordMap(12), batch_size=2)
    callbacks = [save, _CountingBatches()]
    pl.Trainer(max_steps=2, callbacks=callbacks, **_settings(tmp_path)).fit(Recorder(str(tmp_path)), stateful)
    path = tmp_path / "checkpoints" / "saved.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    (state,) = saved_loader_states(checkpoint)
    assert state["_num_yielded"] == 2
    assert saved_callback_states(checkpoint)["counting"] == {"batches": 2}
    plain = pl.Trainer(max_steps=3, enable_checkpointing=False, **_settings(tmp_path))
    with pytest.raises(RuntimeError, match="The CombinedLoader has 0 stateful loaders, but found 1 states"):
        plain.fit(Recorder(str(tmp_path)), loader(12, 2), ckpt_path=str(path))
    remove_saved_loader_states(checkpoint)
    assert saved_loader_states(checkpoint) == []
    torch.save(checkpoint, path)
    resumed = Recorder(str(tmp_path))
    with pytest.warns(UserWarning, match="ended before the epoch ended"):
        pl.Trainer(max_steps=3, enable_checkpointing=False, **_settings(tmp_path)).fit(
            resumed, loader(12, 2), ckpt_path=str(path)
        )
    assert [batch_idx for _, batch_idx, _ in resumed.records["train"]] == [2]


class _Reloading(Recorder):
    def on_train_epoch_end(self) -> None:
        self.records.setdefault("reload", []).append(reload_every_n_epochs(self.trainer))
        set_reload_every_n_epochs(self.trainer, 1 if self.current_epoch == 0 else 0)


def test_the_reload_setting_is_read_at_each_epoch(tmp_path: Path) -> None:
    """What ``set_reload_every_n_epochs`` relies on: the fit loop reads the trainer's
    ``reload_dataloaders_every_n_epochs`` attribute when an epoch starts; set to 1 in epoch 0 it rebuilds the
    loaders for epoch 1 only."""
    built: list[int] = []

    class Data(pl.LightningDataModule):
        def train_dataloader(self) -> DataLoader:
            built.append(len(built))
            return loader(4, 2)

    module = _Reloading(str(tmp_path))
    pl.Trainer(max_epochs=3, **_settings(tmp_path)).fit(module, datamodule=Data())
    assert module.records["reload"] == [0, 1, 0] and len(built) == 2


class _Predicting(Recorder):
    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> Any:
        return batch["id"]


class _Predictions(pl.Callback):
    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        own = predictions_per_loader(trainer)
        assert own is not None and len(own) == predict_loader_count(trainer)
        for position, predictions in enumerate(own):
            predictions[:] = [position]


@pytest.mark.parametrize("loaders", [1, 2])
def test_the_predictions_trainer_predict_returns_are_completed_in_place(tmp_path: Path, loaders: int) -> None:
    """What ``PredictionGatherer`` relies on: the lists ``predictions_per_loader`` gives at ``on_predict_end``
    are those ``trainer.predict`` returns (one list, or one per loader)."""
    trainer = pl.Trainer(callbacks=[_Predictions()], **_settings(tmp_path))
    data = [loader(4, 2) for _ in range(loaders)]
    returned = trainer.predict(_Predicting(str(tmp_path)), data if loaders > 1 else data[0])
    assert returned == ([[0], [1]] if loaders > 1 else [0])
    quiet = pl.Trainer(**_settings(tmp_path))
    quiet.predict(Recorder(str(tmp_path)), data[0], return_predictions=False)
    assert predictions_per_loader(quiet) is None


@pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended")
def test_a_resumed_epoch_counts_the_batch_its_checkpoint_was_written_after(tmp_path: Path) -> None:
    """The saved position is the batches Lightning counted as ready (``LightningResumeHook.consumed``);
    the resumed epoch must go on from there. Lightning 2.5 made it so for a checkpoint written in
    ``on_train_batch_end`` (``ModelCheckpoint(every_n_train_steps=...)``); before, the resumed
    ``batch_idx`` ran one behind, which is why 2.5 is the oldest supported release
    (docs/DESIGN.md, "Supported versions")."""
    settings = {"accelerator": "cpu", "devices": 1, "logger": False, "enable_progress_bar": False}
    settings |= {"enable_model_summary": False, "default_root_dir": str(tmp_path)}
    save = ModelCheckpoint(tmp_path / "checkpoints", every_n_train_steps=2, save_top_k=-1, filename="{step}")
    pl.Trainer(max_steps=2, callbacks=[save], **settings).fit(Recorder(str(tmp_path)), loader(24, 4))
    resumed = Recorder(str(tmp_path))
    trainer = pl.Trainer(max_steps=4, enable_checkpointing=False, **settings)
    trainer.fit(resumed, loader(24, 4), ckpt_path=str(tmp_path / "checkpoints" / "step=2.ckpt"))
    assert [batch_idx for _, batch_idx, _ in resumed.records["train"]] == [2, 3]
    epoch_loop = trainer.fit_loop.epoch_loop
    assert epoch_loop.batch_progress.current.completed == 4
    assert epoch_loop._batches_that_stepped == 4, "the step that logging uses"


def test_strategy_registry_class() -> None:
    from lightning.pytorch.strategies import StrategyRegistry

    assert isinstance(StrategyRegistry, StrategyRegistryType)
    assert callable(StrategyRegistryType.register)


def test_fabric_injects_no_sampler_for_a_strategy_without_sampler_kwargs() -> None:
    import lightning as L

    from lightning_shard import ShardFabricStrategy

    loader = DataLoader(range(10), batch_size=2)
    # NOTE: what `ShardFabricStrategy` relies on: Fabric decides the injection from this public property.
    assert L.Fabric(accelerator="cpu", devices=2, strategy="ddp")._requires_distributed_sampler(loader)
    fabric = L.Fabric(accelerator="cpu", devices=2, strategy=ShardFabricStrategy())
    assert not fabric._requires_distributed_sampler(loader)


def test_private_lightning_names_live_in_one_module() -> None:
    adapter = Path(lightning_shard.lightning.__file__).parent
    for path in adapter.glob("*.py"):
        if path.name == "_private.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lightning"):
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"
        assert "._accelerator_connector" not in path.read_text(), path
        text = path.read_text()
        reached = {
            ast.unparse(node).rsplit("trainer.", 1)[-1]
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Attribute) and ast.unparse(node.value).endswith("trainer")
        }
        reached |= {name for name in _TRAINER_INTERNALS if f'"{name}"' in text}
        assert not reached & _TRAINER_INTERNALS, f"{path.name} reaches {reached & _TRAINER_INTERNALS}"


_TRAINER_INTERNALS = {"fit_loop", "predict_loop", "callbacks", "reload_dataloaders_every_n_epochs"}
"""The trainer's loops, its callback list and a setting kept as an attribute: only through ``_private.py``."""


class _Estimating(Recorder):
    """Reads ``estimated_stepping_batches`` in ``configure_optimizers`` (Lightning builds the training loader
    there) and records, at ``on_train_start``, whether the rebuild found loader states left unloaded."""

    def configure_optimizers(self) -> Any:
        assert self.trainer.estimated_stepping_batches > 0
        return super().configure_optimizers()

    def on_train_start(self) -> None:
        self.records["rebuilt"] = [rebuild_unrestored_training_loaders(self.trainer)]
        self.records["pending_after"] = [len(self.trainer.fit_loop._combined_loader_states_to_load)]


@pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended")
def test_a_loader_built_before_the_restore_leaves_its_state_unloaded_until_rebuilt(tmp_path: Path) -> None:
    """What ``rebuild_unrestored_training_loaders`` relies on: the fit loop keeps the checkpoint's loader
    states in ``_combined_loader_states_to_load`` when the loader was built early (``_combined_loader``
    set, ``setup_data`` returning early); unsetting it and calling ``setup_data`` loads them."""
    settings = {"accelerator": "cpu", "devices": 1, "logger": False, "enable_progress_bar": False}
    settings |= {"enable_model_summary": False, "default_root_dir": str(tmp_path)}
    save = ModelCheckpoint(tmp_path / "checkpoints", every_n_train_steps=2, filename="{step}")

    def data() -> StatefulDataLoader:
        return StatefulDataLoader(RecordMap(24), batch_size=4, shuffle=True)

    # NOTE: `max_epochs` set: with `max_steps` alone Lightning estimates without building the loader.
    settings["max_epochs"] = 1
    pl.Trainer(max_steps=2, callbacks=[save], **settings).fit(_Estimating(str(tmp_path)), data())
    resumed = _Estimating(str(tmp_path))
    trainer = pl.Trainer(max_steps=4, enable_checkpointing=False, **settings)
    trainer.fit(resumed, data(), ckpt_path=str(tmp_path / "checkpoints" / "step=2.ckpt"))
    assert resumed.records["rebuilt"] == [True] and resumed.records["pending_after"] == [0]
    assert [batch_idx for _, batch_idx, _ in resumed.records["train"]] == [2, 3]
    fresh = _Estimating(str(tmp_path))
    pl.Trainer(max_steps=1, **settings).fit(fresh, data())
    assert fresh.records["rebuilt"] == [False], "nothing to rebuild without a checkpoint"


class _Finishing(Recorder):
    def on_train_start(self) -> None:
        self.records["finished"] = [finish_restored_epoch(self.trainer)]


@pytest.mark.filterwarnings("ignore:.*resuming from a checkpoint")
def test_an_epoch_ended_on_its_last_batch_counts_as_ended_whatever_the_new_length(tmp_path: Path) -> None:
    """What ``finish_restored_epoch`` relies on: Lightning takes a checkpoint written on an epoch's last
    batch as mid-epoch when the loader is now longer (7 batches saved, 13 now), unless its epoch loop's
    ``batch_progress.current.completed`` reaches ``num_training_batches``."""
    settings = {"accelerator": "cpu", "devices": 1, "logger": False, "enable_progress_bar": False}
    settings |= {"enable_model_summary": False, "default_root_dir": str(tmp_path), "max_epochs": 2}
    save = ModelCheckpoint(tmp_path / "checkpoints", every_n_train_steps=7, filename="{step}")
    pl.Trainer(max_steps=7, callbacks=[save], **settings).fit(Recorder(str(tmp_path)), loader(14, 2))
    checkpoint = str(tmp_path / "checkpoints" / "step=7.ckpt")
    plain = Recorder(str(tmp_path))
    pl.Trainer(enable_checkpointing=False, **settings).fit(plain, loader(26, 2), ckpt_path=checkpoint)
    assert [b for e, b, _ in plain.records["train"]][:1] == [7], "Lightning alone: mid-epoch at batch 7"
    finishing = _Finishing(str(tmp_path))
    pl.Trainer(enable_checkpointing=False, **settings).fit(finishing, loader(26, 2), ckpt_path=checkpoint)
    assert finishing.records["finished"] == [True]
    assert [b for e, b, _ in finishing.records["train"]] == list(range(13)), "epoch 1 whole"
