"""What users of Lightning expect of a plugin: a logger of our own, rank-zero filtered (``lightning_shard/log.py``),
a plan line that says what it describes, a warning when a ``data_seed`` passed on purpose is ignored on
resume, and ``"shard_notebook"`` for Jupyter (forked processes, fed the code as a notebook is)."""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader

from lightning_shard import ShardOptions, ShardStrategy, StreamShardingWarning, prepare_data_loader
from lightning_shard.comm.topology import Topology
from lightning_shard.lightning.plan import plan_for
from lightning_shard.lightning.schedulers import SchedulerScaling
from lightning_shard.log import logger
from lightning_shard.prepare import prepare_with_options
from tests.docs.blocks import DOCS, blocks
from tests.helpers.datasets import IdStream
from tests.helpers.lightning_app import Recorder, loader
from tests.helpers.runner import ROOT, run_command


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def records() -> Iterator[_Records]:
    """What the ``"lightning_shard"`` logger lets through, at its own level and filter."""
    handler = _Records()
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@pytest.fixture
def one_process(tmp_path: Path) -> Iterator[Path]:
    """A 1-device fit in this process: its process group is destroyed and its environment restored."""
    environment = dict(os.environ)
    try:
        yield tmp_path
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(environment)


def _trainer(out: Path, strategy: ShardStrategy, **kwargs: Any) -> pl.Trainer:
    settings = dict(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    return pl.Trainer(
        strategy=strategy, default_root_dir=str(out), enable_model_summary=False, **settings, **kwargs
    )


# -- the logger ------------------------------------------------------------------------------------


def _plain_stream() -> DataLoader:
    return DataLoader(IdStream(12), batch_size=2)


def test_warnings_keep_their_category_and_the_logger_level_silences_them() -> None:
    with pytest.warns(StreamShardingWarning, match="every process reads the whole iterable dataset"):
        prepare_data_loader(_plain_stream(), num_processes=2, process_index=0)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            prepare_data_loader(_plain_stream(), num_processes=2, process_index=0)
    finally:
        logger.setLevel(level)


def test_only_rank_zero_speaks(records: _Records, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")  # NOTE: no process group: the launcher's variable decides, as Lightning's
    logger.info("not from rank 1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepare_data_loader(_plain_stream(), num_processes=2, process_index=0)
    monkeypatch.setenv("RANK", "0")
    logger.info("from rank 0")
    assert records.messages == ["from rank 0"]


def test_the_plan_line_goes_to_our_logger(one_process: Path, records: _Records) -> None:
    _trainer(one_process, ShardStrategy(), max_epochs=1, enable_checkpointing=False).fit(
        Recorder(str(one_process)), loader(20, 4)
    )
    assert [m for m in records.messages if m.startswith("lightning_shard plan: 1 process (shard)")]


# -- the plan line -----------------------------------------------------------------------------------


def _plan(options: ShardOptions, **kwargs: Any) -> str:
    shard = prepare_with_options(loader(50, 8), options, Topology(2, 0))
    return str(plan_for(shard, SchedulerScaling(True, options.split_batches, 2), **kwargs))


def test_the_plan_says_split_ranks_and_resumed() -> None:
    assert _plan(
        ShardOptions(split_batches=True), num_training_batches=7, accumulate_grad_batches=1
    ).startswith(
        "lightning_shard plan: 2 processes (shard, split), batch size 4 per process and 8 global, 7 optimizer"
    )
    tensor_parallel = _plan(ShardOptions(), num_training_batches=4, accumulate_grad_batches=1, ranks=4)
    assert tensor_parallel.startswith("lightning_shard plan: 2 data-parallel processes of 4 ranks (shard), ")
    resumed = _plan(ShardOptions(), num_training_batches=4, accumulate_grad_batches=1, resumed_batches=3)
    assert "4 optimizer steps per epoch (resumed at step 3: 1 steps left), " in resumed
    accumulated = _plan(ShardOptions(), num_training_batches=8, accumulate_grad_batches=2, resumed_batches=6)
    assert "4 optimizer steps per epoch (resumed at step 3: 1 steps left)" in accumulated
    assert "resumed" not in _plan(ShardOptions(), num_training_batches=4, accumulate_grad_batches=1)


# -- resume: the plan and an ignored data_seed -------------------------------------------------------


def _stopped_at_step_2(out: Path) -> Path:
    save = ModelCheckpoint(out / "checkpoints", every_n_train_steps=2, save_top_k=-1, filename="{step}")
    strategy = ShardStrategy(use_seedable_sampler=True, data_seed=0)
    _trainer(out, strategy, max_steps=2, callbacks=[save]).fit(
        Recorder(str(out)), loader(20, 4, shuffle=True)
    )
    (checkpoint,) = (out / "checkpoints").glob("*.ckpt")
    return checkpoint


def test_a_resumed_fit_says_where_and_warns_about_another_data_seed(
    one_process: Path, records: _Records
) -> None:
    checkpoint = _stopped_at_step_2(one_process)
    resumed = ShardStrategy(use_seedable_sampler=True, data_seed=1)
    with pytest.warns(UserWarning, match=r"`data_seed=1` is ignored in this fit") as warned:
        _trainer(one_process, resumed, max_epochs=1, enable_checkpointing=False).fit(
            Recorder(str(one_process)), loader(20, 4, shuffle=True), ckpt_path=str(checkpoint)
        )
    message = next(str(w.message) for w in warned if "data_seed=1" in str(w.message))
    assert "saved with the seed 0" in message and "start a new fit (no `ckpt_path`)" in message
    assert "5 optimizer steps per epoch (resumed at step 2: 3 steps left)" in str(resumed.shard_plan)


def test_the_same_data_seed_resumes_without_a_warning(one_process: Path) -> None:
    checkpoint = _stopped_at_step_2(one_process)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(one_process, ShardStrategy(use_seedable_sampler=True, data_seed=0), max_epochs=1).fit(
            Recorder(str(one_process)), loader(20, 4, shuffle=True), ckpt_path=str(checkpoint)
        )
    assert not [str(w.message) for w in caught if "is ignored in this fit" in str(w.message)]


# -- notebooks ---------------------------------------------------------------------------------------


@pytest.mark.lightning
def test_the_quick_start_runs_as_a_notebook_cell_with_shard_notebook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick start fed through stdin, as a notebook's kernel runs a cell: no file for a launcher to
    re-run, so only forked processes can run the fit."""
    (train,) = [block.code for block in blocks(DOCS / "quickstart.md") if block.title == "train.py"]
    cell = train.split("trainer.fit(Regressor(), data)\n")[0] + "trainer.fit(Regressor(), data)\n"
    cell = re.sub(r"strategy=strategy\b", 'strategy="shard_notebook"', cell)
    assert 'strategy="shard_notebook"' in cell
    (tmp_path / "cell.py").write_text(cell)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # NOTE: this checkout's package, run from outside it
    # NOTE: generous: two forked processes of a short fit; the bound (no output for so long) ends a hang.
    output = run_command(["sh", "-c", f"{sys.executable} - < cell.py"], timeout=300, cwd=tmp_path)
    assert "lightning_shard plan: 2 processes (shard), batch size 16 per process and 32 global" in output
    assert output.count("lightning_shard plan:") == 1, "rank 0 only"
