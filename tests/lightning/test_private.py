"""Guards for the private Lightning names in ``lightning_shard/lightning/_private.py``, and for the
Lightning behaviour the adapter relies on: these fail as soon as a Lightning release changes them."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import pytest
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.data import _update_dataloader
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler
from torchdata.stateful_dataloader import StatefulDataLoader

import lightning_shard.lightning
from lightning_shard.lightning._private import (
    StrategyRegistryType,
    disable_sampler_injection,
    finish_restored_epoch,
    rebuild_unrestored_training_loaders,
    record_batch_indices,
    sampler_injection_enabled,
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
    progress = _trainer().fit_loop.epoch_loop.batch_progress
    assert progress.current.ready == 0 and progress.is_last_batch is False


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
