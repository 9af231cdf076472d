"""Real ``lightning.Trainer`` fits over torchdata.nodes pipelines and other iterables that are not a
``DataLoader``, for ``tests/lightning/test_nodes.py``, one scenario per call:

    python -m tests.scripts.nodes_fits SCENARIO OUT_DIR [DEVICES]   (from the repository root)

``fits DEVICES``: on ``DEVICES`` processes, 2-epoch fits of a ``Loader`` rooted in a ``SamplerWrapper``
(sequential, shuffled; with and without ``ParallelMapper`` workers), one rooted in an ``IterableWrapper``, one
whose ``MultiNodeWeightedSampler`` is given the rank, and iterables of batches that are not a ``DataLoader``
(split by rank; declared ``splits_by_rank = False``; the same on every process, refused last). ``whole`` /
``kill``: the shuffled ``Loader`` with 2 ``ParallelMapper`` workers on 2 processes, a checkpoint after every
step, uninterrupted or with rank 1 SIGKILLed after step 5; ``restart DEVICES``: the killed fit from its last
checkpoint on ``DEVICES`` processes. Every process records each step's ids (``StepLog``, flushed) and, for the
``fits``, what it trained (``fit_rank{r}.json``, ``Recorder``) or raised (``failure_rank{r}.json``).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import RandomSampler, SequentialSampler, default_collate
from torchdata.nodes import (
    Batcher,
    IterableWrapper,
    Loader,
    Mapper,
    MultiNodeWeightedSampler,
    ParallelMapper,
    SamplerWrapper,
)

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard.lightning import ShardStrategy
from tests.helpers.lightning_app import Recorder, RecordMap, trainer
from tests.scripts.reliability import StepLog, Stop, fit_or_record_failure, last_checkpoint

LENGTH, BATCH = 48, 4
"""48 ids, 4 per process and step: 6 steps an epoch on 2 processes, 4 on 3, nothing padded."""


def node_loader(shuffle: bool, workers: int, length: int = LENGTH) -> Loader:
    """The pipeline of the issue: ids from a sampler, each loaded by a (parallel) mapper, batched, collated."""
    sampler = RandomSampler(range(length)) if shuffle else SequentialSampler(range(length))
    load = RecordMap(length).__getitem__
    root = SamplerWrapper(sampler)
    items = ParallelMapper(root, load, num_workers=workers) if workers else Mapper(root, load)
    return Loader(Mapper(Batcher(items, batch_size=BATCH, drop_last=False), default_collate))


def _stream_loader() -> Loader:
    records = [RecordMap(LENGTH)[i] for i in range(LENGTH)]
    return Loader(Mapper(Batcher(IterableWrapper(records), batch_size=BATCH), default_collate))


def _weighted_loader() -> Loader:
    rank, size = dist.get_rank(), dist.get_world_size()
    halves = {
        "low": IterableWrapper([RecordMap(LENGTH)[i] for i in range(rank, LENGTH // 2, size)]),
        "high": IterableWrapper([RecordMap(LENGTH)[i] for i in range(LENGTH // 2 + rank, LENGTH, size)]),
    }
    # NOTE: drawn per rank, so the processes' epochs would end at different steps: cycled, cut by the Trainer.
    mixed = MultiNodeWeightedSampler(
        halves, {"low": 0.5, "high": 0.5}, stop_criteria="CYCLE_FOREVER", rank=rank, world_size=size
    )
    return Loader(Mapper(Batcher(mixed, batch_size=BATCH), default_collate))


class Batches:
    """A user's own iterable of batches (not a ``DataLoader``): ids ``0 .. LENGTH`` in batches of ``BATCH``,
    each process's share when ``by_rank``, else all of them on every process."""

    def __init__(self, by_rank: bool) -> None:
        self.by_rank = by_rank

    def __iter__(self) -> Any:
        rank, size = (dist.get_rank(), dist.get_world_size()) if self.by_rank else (0, 1)
        ids = list(range(rank, LENGTH, size))
        return (
            default_collate([RecordMap(LENGTH)[i] for i in ids[k : k + BATCH]])
            for k in range(0, len(ids), BATCH)
        )


class Whole(Batches):
    """``Batches`` meant to be read whole by every process, and saying so."""

    splits_by_rank = False


class NodeModule(Recorder):
    """``Recorder`` whose training loader is built in ``train_dataloader``, as the issue's user does."""

    def __init__(self, out_dir: str, make: Any) -> None:
        super().__init__(out_dir)
        self.make = make

    def train_dataloader(self) -> Any:
        return self.make()


def _fit(out: Path, devices: int, make: Any, steps: int | None = None, **kwargs: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fit = trainer(
        out, strategy=ShardStrategy(**kwargs), devices=devices, max_epochs=2, limit_train_batches=steps
    )
    fit_or_record_failure(out, fit, NodeModule(str(out), make), reraise=False)


def fits(out: Path, devices: str, only: str = "") -> None:
    n = int(devices)
    if not only:
        _fit(out / "sequential", n, lambda: node_loader(shuffle=False, workers=0))
        _fit(out / "shuffled_workers", n, lambda: node_loader(shuffle=True, workers=2))
        _fit(
            out / "seedable_workers", n, lambda: node_loader(True, 2), use_seedable_sampler=True, data_seed=3
        )
    _fit(out / "stream", n, _stream_loader)
    _fit(out / "weighted", n, _weighted_loader, steps=4)
    _fit(out / "by_rank", n, lambda: Batches(by_rank=True))
    _fit(out / "declared_whole", n, lambda: Whole(by_rank=False))
    _fit(out / "same", n, lambda: Batches(by_rank=False))  # NOTE: last: refused on every process


def _checkpointed(run: Path, devices: int, *callbacks: Any) -> pl.Trainer:
    every_step = ModelCheckpoint(run / "checkpoints", every_n_train_steps=1, save_top_k=-1, filename="{step}")
    settings = {"callbacks": [StepLog(run), *callbacks, every_step], "enable_checkpointing": True}
    return trainer(run, strategy=ShardStrategy(), devices=devices, max_epochs=2, **settings)


def whole(out: Path) -> None:
    run = out / "whole"
    run.mkdir(parents=True, exist_ok=True)
    _checkpointed(run, 2).fit(NodeModule(str(run), lambda: node_loader(True, 2)))


def kill(out: Path) -> None:
    run = out / "kill"
    run.mkdir(parents=True, exist_ok=True)
    fit = _checkpointed(run, 2, Stop(run, 1, signal.SIGKILL))
    fit_or_record_failure(run, fit, NodeModule(str(run), lambda: node_loader(True, 2)))


def restart(out: Path, devices: str) -> None:
    run = out / f"restart{devices}"
    run.mkdir(parents=True, exist_ok=True)
    fit = trainer(run, strategy=ShardStrategy(), devices=int(devices), max_epochs=2, callbacks=[StepLog(run)])
    fit_or_record_failure(
        run,
        fit,
        NodeModule(str(run), lambda: node_loader(True, 2)),
        ckpt_path=str(last_checkpoint(out / "kill")),
    )


SCENARIOS = {function.__name__: function for function in (fits, whole, kill, restart)}

if __name__ == "__main__":
    name, out_dir, *args = sys.argv[1:]
    pl.seed_everything(0)
    torch.set_num_threads(1)
    SCENARIOS[name](Path(out_dir), *args)
    if name == "kill":
        sys.exit("scenario 'kill': the fit was expected to fail")
