"""Runs cells of the combination matrix (``tests/matrix/cells.py``) as real fits, for
``tests/matrix/test_matrix.py`` and ``make test-matrix``:

    python -m tests.scripts.matrix_fit OUT_DIR CELL_ID [CELL_ID ...]   (from the repository root)

For each cell, in this one launch: the uninterrupted fit (shared by the cells that differ only in the
interruption), the same fit with one rank SIGKILLed at the cell's point and a checkpoint after every
optimizer step, and the fit restarted from its last checkpoint on the cell's number of processes and
workers. ``ShardStrategy`` and ``ShardFabricStrategy`` fork their ranks from this process
(``start_method="fork"``), so a fit costs no start-up; ``ShardModelParallelStrategy`` has no such
launcher, so each of its fits runs ``python -m tests.scripts.matrix_fit --phase PHASE CELL_ID DIR``,
which Lightning starts again for each other rank. Every rank appends the ids of each training batch it
consumed to ``reads_rank{r}.jsonl`` (flushed, so the records of a killed rank survive it) and, when the
fit raises, what it raised to ``error_rank{r}.json``. After each cell one line
``matrix cell I/N OUTCOME ID`` is printed (the launcher's watchdog counts it as progress) and the verdict
of ``tests/matrix/check.py`` is appended to ``OUT_DIR/results.jsonl``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import CombinedLoader
from torch import Tensor, nn
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    RandomSampler,
    Sampler,
    WeightedRandomSampler,
    default_collate,
)

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard import ShardFabricStrategy, ShardModelParallelStrategy, ShardStrategy
from tests.helpers.datasets import (
    IdMap,
    IdShardsStream,
    IdStream,
    MaskedIdStream,
    RankSplitIdStream,
    WorkerSplitIdStream,
    id_shards,
)
from tests.helpers.lightning_app import features
from tests.helpers.lightning_app import trainer as app_trainer
from tests.helpers.mosaic import mosaic_dataset, write_mds
from tests.helpers.reaper import descendants, kill_tree
from tests.helpers.webdataset_shards import sample_id, write_tars
from tests.matrix import check
from tests.matrix.cells import (
    BATCH,
    EPOCHS,
    EXIT_AFTER,
    LIMIT,
    MAX_TOKENS,
    SAMPLER_SEED,
    SHARDS,
    Cell,
    bucket_of,
    length,
    loader_batch,
    token_length,
)

VAL_LENGTH = 10


# -- what a cell trains on ----------------------------------------------------------------------------------
class MarkingLoader(DataLoader):
    """A user's ``DataLoader`` subclass (Lightning's ``test_replace_distributed_sampler``): an attribute of
    its own and an ``__iter__`` that marks every batch, so a batch that did not come through it shows."""

    def __init__(self, dataset: Any, *args: Any, mark: str = "subclass", **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        self.mark = mark

    def __iter__(self) -> Any:
        for batch in super().__iter__():
            yield {"id": batch, "mark": self.mark}


class Buckets(BatchSampler):
    """Length bucketing as NLP projects write it: a ``BatchSampler`` subclass keeping ``batch_size``; the
    ids its sampler draws are grouped by bucket (``bucket_of``), each bucket cut into batches (its last
    one short), and the batches shuffled with the sampler's generator, so short batches come mid-epoch."""

    def __init__(self, sampler: RandomSampler, batch_size: int) -> None:
        super().__init__(sampler, batch_size, drop_last=False)

    def _batches(self, ids: Any) -> list[list[int]]:
        buckets: list[list[int]] = [[], [], []]
        for index in ids:
            buckets[bucket_of(int(index))].append(int(index))
        size = self.batch_size
        return [bucket[i : i + size] for bucket in buckets for i in range(0, len(bucket), size)]

    def __iter__(self) -> Any:
        batches = self._batches(self.sampler)
        generator = self.sampler.generator  # type: ignore[attr-defined]
        return iter([batches[k] for k in torch.randperm(len(batches), generator=generator).tolist()])

    def __len__(self) -> int:
        return len(self._batches(range(len(self.sampler))))  # type: ignore[arg-type]


class MaxTokens(Sampler[list[int]]):
    """A max-tokens batch sampler (fairseq's ``batch_by_size``): no ``batch_size``; the ids of one
    ``token_length`` fill a batch up to ``MAX_TOKENS`` (4, 3 or 2 ids), in an order drawn from
    ``(SAMPLER_SEED, epoch)``, so the batches (and ``len()``) of an epoch are known before it runs."""

    def __init__(self, count: int) -> None:
        self.count, self.epoch = count, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        generator = torch.Generator().manual_seed(SAMPLER_SEED + self.epoch)
        groups: dict[int, list[int]] = {}
        for index in torch.randperm(self.count, generator=generator).tolist():
            groups.setdefault(token_length(index), []).append(index)
        batches = [
            group[i : i + MAX_TOKENS // tokens]
            for tokens, group in sorted(groups.items())
            for i in range(0, len(group), MAX_TOKENS // tokens)
        ]
        return [batches[k] for k in torch.randperm(len(batches), generator=generator).tolist()]

    def __iter__(self) -> Any:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


class EvenIds(RandomSampler):
    """A filtering ``RandomSampler`` subclass (no generator of its own): the even ids, shuffled."""

    def __iter__(self) -> Any:
        return (index for index in super().__iter__() if index % 2 == 0)

    def __len__(self) -> int:
        return (len(self.data_source) + 1) // 2  # type: ignore[arg-type]


class GlobalPermutation(Sampler[int]):
    """A user's sampler drawing from the global random state: ``torch.randperm(n)``, no generator."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __iter__(self) -> Any:
        return iter(torch.randperm(self.count).tolist())

    def __len__(self) -> int:
        return self.count


def _weights(count: int) -> Tensor:
    """Class imbalance: ids ``i % 3 == 2`` are drawn three times as often as ``i % 3 == 0``."""
    return torch.tensor([1.0 + index % 3 for index in range(count)], dtype=torch.double)


def _own_sampler(cell: Cell, workers: int) -> Any:
    """The training loader of a cell with a sampler of the user's own (``cells.AXES``, ``sampler``)."""
    count, batch = length(cell), loader_batch(cell)
    dataset = IdMap(count)
    loader: Any = DataLoader
    settings: dict[str, Any] = _workers(workers)
    if cell.loader == "subclass":
        loader, settings = MarkingLoader, {**settings, "mark": "ok"}
    if cell.sampler == "bucketing":
        ordered = RandomSampler(dataset, generator=torch.Generator().manual_seed(SAMPLER_SEED))
        return loader(dataset, batch_sampler=Buckets(ordered, batch), **settings)
    if cell.sampler == "max_tokens":
        return loader(dataset, batch_sampler=MaxTokens(count), **settings)
    samplers = {
        "weighted": lambda: WeightedRandomSampler(_weights(count), count, replacement=True),
        "weighted_gen": lambda: WeightedRandomSampler(
            _weights(count), count, replacement=True, generator=torch.Generator().manual_seed(SAMPLER_SEED)
        ),
        "filtering": lambda: EvenIds(dataset),
        "global_rng": lambda: GlobalPermutation(count),
    }
    return loader(dataset, batch, sampler=samplers[cell.sampler](), **settings)


def _workers(workers: int) -> dict[str, Any]:
    # NOTE: forked workers, as the ranks are: Python 3.14 makes forkserver the default elsewhere.
    return {"num_workers": workers, "multiprocessing_context": "fork"} if workers else {}


def _local_data(kind: str) -> str:
    """The webdataset tars (``"webdataset"``) or MDS dataset (``"mds"``) of ``SHARDS``, written once on this
    machine (into a directory of their own, renamed into place: concurrent launches each find it whole)."""
    home = Path(tempfile.gettempdir()) / f"lightning_shard_matrix_{kind}_{'_'.join(map(str, SHARDS))}"
    if not home.exists():
        with tempfile.TemporaryDirectory(dir=home.parent) as draft:
            if kind == "webdataset":
                write_tars(draft + "/data", SHARDS)
            else:
                write_mds(draft + "/data", sum(SHARDS), SHARDS[0])
            with contextlib.suppress(OSError):  # NOTE: another launch renamed its own first
                os.rename(draft + "/data", home)
    return str(home)


def _webdataset() -> Any:
    import webdataset as wds

    tars = sorted(str(path) for path in Path(_local_data("webdataset")).glob("*.tar"))
    return wds.WebDataset(tars, shardshuffle=False, nodesplitter=wds.split_by_node).map(sample_id)


def _mosaic(cell: Cell) -> Any:
    """Built in the rank (the library reads its rank and world size when it is built), with the batch size
    of each process's batches, as its documentation asks."""
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    batch = loader_batch(cell) // world if cell.mode == "split" else loader_batch(cell)
    return mosaic_dataset(_local_data("mds"), rank, world, batch_size=batch, shuffle=True)


def train_loader(cell: Cell, workers: int) -> Any:
    """The training loader of ``cell`` (a ``CombinedLoader`` for ``feature="combined"``)."""
    batch = loader_batch(cell)
    count = length(cell)
    kinds = {
        "shuffled": lambda: DataLoader(IdMap(count), batch, shuffle=True, **_workers(workers)),
        "seedable": lambda: DataLoader(IdMap(count), batch, shuffle=True, **_workers(workers)),
        "sequential": lambda: DataLoader(IdMap(count), batch, **_workers(workers)),
        "subclass": lambda: MarkingLoader(IdMap(count), batch, shuffle=True, mark="ok", **_workers(workers)),
        "unbatched": lambda: DataLoader(IdMap(count), batch_size=None, shuffle=True, **_workers(workers)),
        "strided": lambda: DataLoader(IdStream(count), batch),
        "worker_split": lambda: DataLoader(WorkerSplitIdStream(count), batch, **_workers(workers)),
        "masked": lambda: DataLoader(MaskedIdStream(count), batch, **_workers(workers)),
        "native": lambda: DataLoader(IdShardsStream(id_shards(SHARDS)), batch, **_workers(workers)),
        "hf": lambda: DataLoader(_hf(), batch, **_workers(workers)),
        "self_split": lambda: DataLoader(RankSplitIdStream(id_shards(SHARDS)), batch, **_workers(workers)),
        "webdataset": lambda: DataLoader(_webdataset(), batch, **_workers(workers)),
        "mosaic": lambda: DataLoader(_mosaic(cell), batch, **_workers(workers)),
        "nodes": lambda: node_graph(count, batch, workers),
    }
    data = kinds[cell.loader]() if cell.sampler == "default" else _own_sampler(cell, workers)
    if cell.feature == "combined":
        # NOTE: with `even_batches=False`, 18: 6 batches, as many per process on 1, 2 and 3 processes.
        other = DataLoader(IdMap(20 if cell.even else 18), batch, shuffle=True, **_workers(workers))
        return CombinedLoader({"a": data, "b": other}, mode="max_size_cycle")
    return data


def node_graph(count: int, batch: int, workers: int) -> Any:
    """A torchdata.nodes ``Loader``: shuffled ids, each loaded by a ``ParallelMapper`` (``workers`` threads),
    batched (keeping the short last batch) and collated, as ``DataLoader(IdMap(count), batch, shuffle=True)``."""
    from torchdata.nodes import Batcher, Loader, ParallelMapper, SamplerWrapper

    items = ParallelMapper(SamplerWrapper(RandomSampler(range(count))), IdMap(count).__getitem__, workers)
    return Loader(ParallelMapper(Batcher(items, batch_size=batch, drop_last=False), default_collate, 0))


def _hf() -> Any:
    from tests.helpers.hf import hf_id_stream

    return hf_id_stream(SHARDS)


def read_ids(batch: Any) -> dict[str, Any]:
    """``{"a": ids}`` (and ``"b"`` for a ``CombinedLoader``), and whether the subclass marked the batch."""
    if isinstance(batch, dict) and "a" in batch:
        return {key: _ids(value) for key, value in batch.items() if value is not None}
    record: dict[str, Any] = {"a": _ids(batch)}
    if isinstance(batch, dict) and "mark" in batch:
        record["mark"] = batch["mark"]
    return record


def _ids(batch: Any) -> list[int]:
    value = (
        batch["id"] if isinstance(batch, dict) else batch[0] if isinstance(batch, (list, tuple)) else batch
    )
    return torch.as_tensor(value).reshape(-1).tolist()


def _loss(layer: nn.Module, batch: Any) -> Tensor:
    ids = [i for values in read_ids(batch).values() if isinstance(values, list) for i in values]
    x = torch.stack([features(int(i)) for i in ids]).to(next(layer.parameters()).device)
    return nn.functional.mse_loss(layer(x), x.sum(dim=1, keepdim=True))


def _options(cell: Cell) -> dict[str, Any]:
    return {
        "split_batches": cell.mode == "split",
        "dispatch_batches": cell.mode == "dispatch",
        "put_on_device": cell.mode == "dispatch",
        "even_batches": cell.even,
        "use_seedable_sampler": cell.loader == "seedable",
    }


# -- the Trainer cells ---------------------------------------------------------------------------------------
class MatrixModule(pl.LightningModule):
    """One linear layer on features computed from the ids; the feature's optimizer / early exit."""

    def __init__(self, feature: str) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.feature = feature

    def configure_model(self) -> None:
        """Under ``ShardModelParallelStrategy``: the layer sharded with FSDP2 over the data-parallel mesh."""
        if self.device_mesh is not None:
            from torch.distributed.fsdp import fully_shard

            fully_shard(self.layer, mesh=self.device_mesh["data_parallel"])

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return _loss(self.layer, batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        _loss(self.layer, batch)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        return -1 if self.feature == "early_exit" and batch_idx == EXIT_AFTER else None

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)  # NOTE: state to restore
        if self.feature not in ("onecycle", "onecycle_lightning"):
            return optimizer
        if self.feature == "onecycle":
            steps = self.trainer.strategy.estimated_scheduler_steps  # type: ignore[attr-defined]
        else:
            steps = int(self.trainer.estimated_stepping_batches)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=max(steps, 1) + 1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class Reads(pl.Callback):
    """Appends each consumed training batch's ids, flushed; counts them into every checkpoint."""

    def __init__(self, run: Path) -> None:
        self.run, self.count = run, 0

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.count += 1
        record = {"epoch": trainer.current_epoch, "batch_idx": batch_idx, **read_ids(batch)}
        with open(self.run / f"reads_rank{trainer.global_rank}.jsonl", "a") as file:
            file.write(json.dumps(record) + "\n")

    def on_save_checkpoint(self, trainer: pl.Trainer, module: Any, checkpoint: dict[str, Any]) -> None:
        checkpoint["matrix_reads"] = self.count

    def on_exception(self, trainer: pl.Trainer, module: Any, exception: BaseException) -> None:
        # NOTE: with forked ranks, Lightning handles a rank's exception in the launching process only, where
        # it arrives as torch's `ProcessRaisedException` holding the rank's traceback and message.
        forked = type(exception).__name__ in ("ProcessRaisedException", "ProcessExitedException")
        name = "error_launcher.json" if forked else f"error_rank{trainer.global_rank}.json"
        record = {"error": type(exception).__name__, "message": str(exception)[-3000:]}
        (self.run / name).write_text(json.dumps(record))


class Kill(pl.Callback):
    """SIGKILLs rank ``cell.victim`` at the cell's interruption point, leaving the file ``KILLED`` in ``run``
    first (a script launch's supervisor then ends the survivors, as ``torchrun``'s agent would)."""

    def __init__(self, cell: Cell, run: Path) -> None:
        self.cell, self.run, self.count = cell, run, 0

    def _kill(self, trainer: pl.Trainer) -> None:
        if trainer.global_rank == self.cell.victim:
            (self.run / KILLED).touch()
            os.kill(os.getpid(), signal.SIGKILL)

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.count += 1
        if self.cell.interrupt == "step" and self.count == self.cell.kill_at:
            self._kill(trainer)

    def on_validation_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        if (
            self.cell.interrupt == "validation"
            and self.count >= self.cell.kill_at
            and not trainer.sanity_checking
        ):
            self._kill(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, module: Any) -> None:
        if self.cell.interrupt == "epoch_end" and self.count >= self.cell.kill_at:
            self._kill(trainer)


def _strategy(cell: Cell, devices: int) -> Any:
    if cell.strategy == "model_parallel":
        # NOTE: every process data-parallel ("auto" would make them tensor-parallel peers on one node).
        return ShardModelParallelStrategy(
            data_parallel_size=devices,
            tensor_parallel_size=1,
            save_distributed_checkpoint=False,
            **_options(cell),
        )
    return ShardStrategy(start_method="fork", **_options(cell))


_FEATURES: dict[str, dict[str, Any]] = {
    "accumulate": {"accumulate_grad_batches": 2},
    "limit": {"limit_train_batches": LIMIT},
    "val_float": {"val_check_interval": 0.5},
    "reload": {"reload_dataloaders_every_n_epochs": 1},
}


def _validates(cell: Cell) -> bool:
    return cell.feature == "val_float" or cell.interrupt == "validation"


def _seed(phase: str, checkpoint: Path | None) -> int:
    """The global seed of a fit: another one for a restart from a checkpoint, so that only the checkpoint
    may carry the order; a restart with none (killed before the first) is the user's script run again."""
    return 1 if phase == "restart" and checkpoint is not None else 0


def trainer_phase(cell: Cell, phase: str, run: Path, checkpoint: Path | None = None) -> None:
    """One fit of ``cell``: ``full``, ``kill`` (checkpointed every step) or ``restart`` (from ``checkpoint``)."""
    devices = cell.restart_devices if phase == "restart" else cell.devices
    workers = cell.restart_num_workers if phase == "restart" else cell.workers
    callbacks: list[pl.Callback] = [Reads(run)]
    settings: dict[str, Any] = {"max_epochs": EPOCHS, **_FEATURES.get(cell.feature, {})}
    if phase == "kill":
        save = ModelCheckpoint(run / "checkpoints", every_n_train_steps=1, save_top_k=-1, filename="{step}")
        callbacks += [Kill(cell, run), save]
        settings["enable_checkpointing"] = True
    if not _validates(cell):
        settings["limit_val_batches"] = 0
    pl.seed_everything(_seed(phase, checkpoint))
    fit = app_trainer(run, _strategy(cell, devices), devices, callbacks=callbacks, **settings)
    val = (
        DataLoader(IdMap(VAL_LENGTH), BATCH * 2 if cell.mode == "split" else BATCH)
        if _validates(cell)
        else None
    )
    # NOTE: a mosaicml-streaming dataset is built in each rank, once it runs (a `LightningDataModule` hook).
    if cell.loader == "mosaic":
        fit.fit(MatrixModule(cell.feature), datamodule=TrainData(cell, workers, val), ckpt_path=checkpoint)
    else:
        fit.fit(MatrixModule(cell.feature), train_loader(cell, workers), val, ckpt_path=checkpoint)


class TrainData(pl.LightningDataModule):
    """``train_loader(cell, workers)`` built in each rank, and the validation loader ``val`` (or none)."""

    def __init__(self, cell: Cell, workers: int, val: DataLoader | None) -> None:
        super().__init__()
        self.cell, self.workers, self.val = cell, workers, val

    def train_dataloader(self) -> Any:
        return train_loader(self.cell, self.workers)

    def val_dataloader(self) -> Any:
        return self.val if self.val is not None else []


# -- the Fabric cells ----------------------------------------------------------------------------------------
def fabric_phase(fabric: L.Fabric, cell: Cell, phase: str, run: Path, checkpoint: Path | None) -> None:
    """The loop a Fabric user writes; ``kill`` saves model, optimizer and loader after every step."""
    try:
        _fabric_loop(fabric, cell, phase, run, checkpoint)
    except Exception as error:
        record = {"error": type(error).__name__, "message": str(error)[:3000]}
        (run / f"error_rank{fabric.global_rank}.json").write_text(json.dumps(record))
        raise


def _fabric_loop(fabric: L.Fabric, cell: Cell, phase: str, run: Path, checkpoint: Path | None) -> None:
    L.seed_everything(_seed(phase, checkpoint))
    layer = nn.Linear(4, 1)
    model, optimizer = fabric.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.05, momentum=0.9))
    workers = cell.restart_num_workers if phase == "restart" else cell.workers
    data = fabric.setup_dataloaders(train_loader(cell, workers))
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "loader": data}
    start, done, count = 0, 0, 0
    if checkpoint is not None:
        rest = fabric.load(checkpoint, state)
        start, done, count = rest["epoch"], rest["epoch_batches"], rest["matrix_reads"]
    for epoch in range(start, EPOCHS):
        for index, batch in enumerate(data, start=done if epoch == start else 0):
            if cell.feature == "early_exit" and index == EXIT_AFTER:
                break
            optimizer.zero_grad()
            fabric.backward(_loss(model, batch))
            optimizer.step()
            count += 1
            with open(run / f"reads_rank{fabric.global_rank}.jsonl", "a") as file:
                file.write(json.dumps({"epoch": epoch, "batch_idx": index, **read_ids(batch)}) + "\n")
            if phase == "kill":
                if cell.interrupt == "step" and count == cell.kill_at:
                    _kill_victim(fabric.global_rank, cell)
                _save(
                    fabric, run, {**state, "epoch": epoch, "epoch_batches": index + 1, "matrix_reads": count}
                )
        if phase == "kill":
            # NOTE: as Fabric's examples do, the epoch's end is saved too (the next epoch, from its start). Not
            # after a `break`: the loader's state then continues the epoch left (as torchdata's
            # `StatefulDataLoader`'s does; docs/guides/parallel.md), so such a loop saves inside the loop.
            if cell.feature != "early_exit":
                _save(fabric, run, {**state, "epoch": epoch + 1, "epoch_batches": 0, "matrix_reads": count})
            if cell.interrupt == "epoch_end" and count >= cell.kill_at:
                _kill_victim(fabric.global_rank, cell)


def _save(fabric: L.Fabric, run: Path, state: dict[str, Any]) -> None:
    fabric.save(run / "checkpoints" / f"reads={state['matrix_reads']}-epoch={state['epoch']}.ckpt", state)


def _kill_victim(rank: int, cell: Cell) -> None:
    if rank == cell.victim:
        os.kill(os.getpid(), signal.SIGKILL)


# -- phases and the driver -------------------------------------------------------------------------------------
def run_phase(cell: Cell, phase: str, run: Path, checkpoint: Path | None = None) -> None:
    """One fit of ``cell`` in this process (its ranks forked from it, or started by Lightning's script launcher)."""
    run.mkdir(parents=True, exist_ok=True)
    if cell.strategy == "fabric":
        devices = cell.restart_devices if phase == "restart" else cell.devices
        fabric = L.Fabric(
            accelerator="cpu",
            devices=devices,
            strategy=ShardFabricStrategy(start_method="fork", **_options(cell)),
        )
        fabric.launch(fabric_phase, cell, phase, run, checkpoint)
    else:
        trainer_phase(cell, phase, run, checkpoint)


def launch_phase(cell: Cell, phase: str, run: Path, checkpoint: Path | None = None) -> str | None:
    """Run one fit; ``None`` when it succeeded, else what it raised (the kill of a rank included). What the
    fit left running (``_end_leftovers``) is ended before the next one."""
    before = set(descendants(os.getpid()))
    try:
        return _fit(cell, phase, run, checkpoint)
    finally:
        _end_leftovers(before)


def _fit(cell: Cell, phase: str, run: Path, checkpoint: Path | None) -> str | None:
    if cell.strategy == "model_parallel":
        command = [sys.executable, "-m", "tests.scripts.matrix_fit", "--phase", phase, cell.id, str(run)]
        run.mkdir(parents=True, exist_ok=True)
        with open(run / "launch.log", "w+") as log:
            code = _supervised(
                subprocess.Popen([*command, str(checkpoint or "")], stdout=log, stderr=log), run
            )
            log.seek(0)
            output = log.read()
        return None if code == 0 else f"exit {code}: {output[-3000:]}"
    os.environ.pop(
        "MASTER_PORT", None
    )  # NOTE: the fork launcher keeps its port in the environment; a new one each fit
    try:
        run_phase(cell, phase, run, checkpoint)
    except Exception as error:  # noqa: BLE001 - the verdict reads it
        return f"{type(error).__name__}: {str(error)[-3000:]}"
    return None


KILLED = "KILLED"
SURVIVOR_GRACE = 60.0
"""Seconds the survivors of a killed rank get to end by themselves (gloo ends them at their next collective,
in seconds; generous for a loaded machine) before the supervisor ends them: Lightning's script launcher
leaves them running, and a peer waiting outside a collective (mosaicml-streaming's node barrier, at an
epoch's start) would wait forever."""


def _supervised(process: subprocess.Popen[bytes], run: Path) -> int:
    """Wait for a script launch; once its victim left ``KILLED``, end what is left after ``SURVIVOR_GRACE``."""
    killed_at: float | None = None
    while True:
        try:
            return process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            if killed_at is None and (run / KILLED).exists():
                killed_at = time.monotonic()
            if killed_at is not None and time.monotonic() - killed_at > SURVIVOR_GRACE:
                kill_tree(process.pid)


def run_cell(cell: Cell, out: Path, fulls: dict[str, Path]) -> dict[str, Any]:
    """The three fits of ``cell`` under ``out`` and the verdict of ``tests/matrix/check.py``."""
    start = time.monotonic()
    key = cell.full_key
    errors: dict[str, str | None] = {}
    if key not in fulls:
        fulls[key] = out / "full" / str(len(fulls))
        errors["full"] = launch_phase(cell, "full", fulls[key])
        (fulls[key] / "error.txt").write_text(errors["full"] or "")
    else:
        errors["full"] = (fulls[key] / "error.txt").read_text() or None
    cell_dir = out / "cells" / str(len(list((out / "cells").glob("*"))) if (out / "cells").exists() else 0)
    errors["kill"] = launch_phase(cell, "kill", cell_dir / "kill")
    # NOTE: a kill before the first checkpoint restarts from the beginning, as a user would.
    errors["restart"] = launch_phase(
        cell, "restart", cell_dir / "restart", check.last_checkpoint(cell_dir / "kill")
    )
    verdict = check.verdict(cell, fulls[key], cell_dir, errors)
    verdict["seconds"] = round(time.monotonic() - start, 1)
    verdict["dir"] = str(cell_dir)
    return verdict


def _adopt_orphans() -> None:
    """Make this process the parent of its descendants' orphans (Linux ``PR_SET_CHILD_SUBREAPER``).

    NOTE: a SIGKILLed rank's ``DataLoader`` workers are orphaned; torch ends them from its worker loop, but
    one blocked at exit, writing to a full result pipe that its sibling holds open, lives on, and with it
    this launch's output: the runner then waits out its whole bound (seen once in `make test`). Adopted,
    they are this process's descendants, which ``_end_leftovers`` ends after each fit.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def _end_leftovers(before: set[int]) -> None:
    """SIGKILL (and reap) the descendants of this process that a fit started and left running."""
    for pid in [pid for pid in descendants(os.getpid()) if pid not in before]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def main(out: Path, ids: list[str]) -> None:
    _adopt_orphans()
    out.mkdir(parents=True, exist_ok=True)
    fulls: dict[str, Path] = {}
    for index, text in enumerate(ids, 1):
        cell = Cell.parse(text)
        verdict = run_cell(cell, out, fulls)
        with open(out / "results.jsonl", "a") as file:
            file.write(json.dumps(verdict) + "\n")
        print(
            f"matrix cell {index}/{len(ids)} {verdict['outcome']} {cell.id} ({verdict['seconds']}s)",
            flush=True,
        )


if __name__ == "__main__":
    if sys.argv[1] == "--phase":
        phase, text, run, saved = sys.argv[2:6]
        run_phase(Cell.parse(text), phase, Path(run), Path(saved) if saved else None)
    else:
        main(Path(sys.argv[1]), sys.argv[2:])
