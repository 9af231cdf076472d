"""Real 2-process ``lightning.Trainer`` runs for ``tests/lightning/test_reliability.py``, one scenario per call:

    python -m tests.scripts.reliability SCENARIO OUT_DIR [ARG]   (from the repository root)

``audit``: the shard audit of a correct fit and of two misused samplers, and the refusal of uneven
training. ``kill VICTIM [DEVICES]``: rank ``VICTIM`` of a fit on ``DEVICES`` (2) processes that checkpoints
every 2 steps is SIGKILLed after step 5. ``restart DEVICES [KILLED]``: the fit killed on ``KILLED`` (2)
processes restarted from its last checkpoint on ``DEVICES`` processes; the checkpoint carries the epoch's
audit record, so the restarted epoch is audited whole.
``freeze``: rank 1 stops (SIGSTOP) after step 5; rank 0 runs with a collective timeout, armed once every
process has taken its first step (``armed_rank{r}.json`` records when).

Every process writes, flushed at each step, the sample ids of each training step it finished
(``steps_rank{r}.jsonl``), so the records of a killed process survive it; and, when its fit fails,
what it raised (its class and bases), its message and when (``failure_rank{r}.json``).
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.distributed.distributed_c10d import _set_pg_timeout
from torch.utils.data import DataLoader, Sampler

import lightning_shard  # noqa: F401 - registers the "shard" strategies
from lightning_shard.lightning import ShardStrategy
from tests.helpers.lightning_app import Recorder, RecordMap, loader
from tests.helpers.lightning_app import trainer as app_trainer

LENGTH, BATCH = 50, 4
"""50 samples, 4 per process and step: 7 steps per epoch on 2 processes, the last one padded with 6."""
KILL_AT = 5
"""The victim dies in ``on_train_batch_end`` once ``global_step`` is 5; the last checkpoint is step 4."""
FREEZE_TIMEOUT = datetime.timedelta(seconds=20)
"""The collective timeout of the frozen-peer run, armed after its first step (``ArmTimeout``).

NOTE: not ``ShardStrategy(timeout=...)``: that one also bounds the start-up (Lightning starts rank 1 as a
new interpreter that imports torch and Lightning while rank 0 waits for it in the rendezvous), which on
2 cores under a load average of 10 took longer than 20 s and failed the fit before any step. The start-up
keeps Lightning's default (30 minutes); a hang there is the launcher's to catch (its silence bound)."""


def trainer(out: Path, strategy: Any = None, devices: int = 2, **kwargs: Any) -> pl.Trainer:
    """The shared test ``Trainer``, 2 epochs, with an auditing ``ShardStrategy`` unless told otherwise."""
    return app_trainer(out, strategy or ShardStrategy(audit=True), devices, **{"max_epochs": 2, **kwargs})


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


class StepLog(pl.Callback):
    """Appends ``{"epoch", "batch_idx", "step", "ids"}`` of each finished training step, flushed at once."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        record = {
            "epoch": trainer.current_epoch,
            "batch_idx": batch_idx,
            "step": trainer.global_step,
            "ids": batch["id"].tolist(),
        }
        with open(self.out / f"steps_rank{trainer.global_rank}.jsonl", "a") as file:
            file.write(json.dumps(record) + "\n")


class Stop(pl.Callback):
    """Sends ``signum`` to its own process on rank ``victim`` once ``global_step`` reaches ``KILL_AT``."""

    def __init__(self, out: Path, victim: int, signum: int) -> None:
        self.out, self.victim, self.signum = out, victim, signum

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step == KILL_AT and trainer.global_rank == self.victim:
            (self.out / "signalled.json").write_text(json.dumps({"time": time.time(), "pid": os.getpid()}))
            os.kill(os.getpid(), self.signum)


class ArmTimeout(pl.Callback):
    """Once this process has taken its first step (the group is up and every process is in the loop),
    sets the default group's collective timeout to ``FREEZE_TIMEOUT`` and records when
    (``armed_rank{r}.json``): what follows is bounded by it, what came before is not."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step == 1:
            _set_pg_timeout(FREEZE_TIMEOUT)
            marker = self.out / f"armed_rank{trainer.global_rank}.json"
            marker.write_text(json.dumps({"time": time.time()}))


def fit_or_record_failure(
    out: Path, fit: pl.Trainer, *args: Any, reraise: bool = True, **kwargs: Any
) -> None:
    """``fit.fit(...)``; if it raises, write what and when to ``failure_rank{r}.json`` (and re-raise)."""
    try:
        fit.fit(*args, **kwargs)
    except Exception as error:
        # NOTE: the class and its bases ("DistBackendError", "RuntimeError", ...): tests check the kind of error.
        kinds = [kind.__name__ for kind in type(error).__mro__]
        record = {"time": time.time(), "error": kinds[0], "kinds": kinds, "message": str(error)[:2000]}
        (out / f"failure_rank{fit.global_rank}.json").write_text(json.dumps(record))
        if reraise:
            raise


# -- audit ----------------------------------------------------------------------------------------------
class ShardedByHand(Sampler[int]):
    """Already keeps only this process's share (``rank::world``), as a ``DistributedSampler`` would."""

    def __init__(self, length: int) -> None:
        self.length = length

    def _share(self) -> range:
        world = dist.get_world_size() if dist.is_initialized() else 1
        return range(_rank(), self.length, world)

    def __iter__(self) -> Iterator[int]:
        return iter(self._share())

    def __len__(self) -> int:
        return len(self._share())


class ShuffledPerRank(Sampler[int]):
    """Shuffles with a seed of its own on each process (no ``generator`` attribute to synchronise)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(1000 + _rank())
        return iter(torch.randperm(self.length, generator=generator).tolist())

    def __len__(self) -> int:
        return self.length


def _audits(out: Path, fit: pl.Trainer) -> None:
    audits = [[a.epoch, a.ok, a.complete, a.summary()] for a in fit.strategy.audits]  # type: ignore[attr-defined]
    (out / f"audits_rank{fit.global_rank}.json").write_text(json.dumps(audits))


def _audited_fit(out: Path, data: DataLoader, **kwargs: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fit = trainer(out, **kwargs)
    fit.fit(Recorder(str(out)), data)
    _audits(out, fit)


def audit(out: Path) -> None:
    """Correct fits (workers read ahead; stopped early; dispatched), two misused samplers, uneven training."""
    _audited_fit(out / "correct", loader(LENGTH, BATCH, shuffle=True, num_workers=2))
    _audited_fit(out / "early", loader(LENGTH, BATCH, shuffle=True), max_epochs=1, max_steps=3)
    dispatch = ShardStrategy(dispatch_batches=True, put_on_device=True, audit=True)
    _audited_fit(out / "dispatch", loader(45, BATCH, shuffle=True), strategy=dispatch, max_epochs=1)
    _audited_fit(out / "by_hand", DataLoader(RecordMap(LENGTH), BATCH, sampler=ShardedByHand(LENGTH)))
    _uneven(out / "uneven")
    (out / "per_rank").mkdir(exist_ok=True)
    raising = trainer(out / "per_rank", strategy=ShardStrategy(audit=True, audit_raise=True))
    data = DataLoader(RecordMap(LENGTH), BATCH, sampler=ShuffledPerRank(LENGTH))
    fit_or_record_failure(out / "per_rank", raising, Recorder(str(out / "per_rank")), data, reraise=False)


def _uneven(out: Path) -> None:
    """``even_batches=False`` with 7 and 6 batches per process: refused at setup on both processes."""
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    uneven = trainer(out, strategy=ShardStrategy(even_batches=False))
    try:
        uneven.fit(Recorder(str(out)), loader(LENGTH, BATCH))
    except ValueError as error:
        record = {"seconds": time.monotonic() - start, "message": str(error)}
        (out / f"refused_rank{uneven.global_rank}.json").write_text(json.dumps(record))


# -- kill and restart ------------------------------------------------------------------------------------
def killed_dir(out: Path, devices: int) -> Path:
    """Where the fit killed on ``devices`` processes writes (``kill`` for 2, ``kill1`` for 1)."""
    return out / ("kill" if devices == 2 else f"kill{devices}")


def kill(out: Path, victim: str, devices: str = "2") -> None:
    """A shuffled, checkpointed fit in which rank ``victim`` is SIGKILLed after step 5."""
    run = killed_dir(out, int(devices))
    run.mkdir(parents=True, exist_ok=True)
    checkpoints = ModelCheckpoint(
        run / "checkpoints", every_n_train_steps=2, save_top_k=-1, filename="{step}"
    )
    callbacks = [StepLog(run), Stop(run, int(victim), signal.SIGKILL), checkpoints]
    fit = trainer(run, devices=int(devices), callbacks=callbacks, enable_checkpointing=True)
    fit_or_record_failure(run, fit, Recorder(str(run)), loader(LENGTH, BATCH, shuffle=True))


def last_checkpoint(run: Path) -> Path:
    return max((run / "checkpoints").glob("*.ckpt"), key=lambda path: int(path.stem.split("=")[1]))


def restart(out: Path, devices: str, killed: str = "2") -> None:
    """The fit killed on ``killed`` processes, restarted from its last checkpoint on ``devices``, to its end."""
    run = out / (f"restart{devices}" if killed == "2" else f"restart{killed}to{devices}")
    run.mkdir(parents=True, exist_ok=True)
    fit = trainer(run, devices=int(devices), callbacks=[StepLog(run)])
    data = loader(LENGTH, BATCH, shuffle=True)
    fit.fit(Recorder(str(run)), data, ckpt_path=str(last_checkpoint(killed_dir(out, int(killed)))))
    _audits(run, fit)


def freeze(out: Path) -> None:
    """Rank 1 stops (SIGSTOP) after step 5; rank 0 must fail after ``FREEZE_TIMEOUT`` (armed at step 1)."""
    run = out / "freeze"
    callbacks = [StepLog(run), ArmTimeout(run), Stop(run, 1, signal.SIGSTOP)]
    fit = trainer(run, strategy=ShardStrategy(), callbacks=callbacks)
    try:
        fit_or_record_failure(run, fit, Recorder(str(run)), loader(LENGTH, BATCH, shuffle=True))
    finally:
        _end_frozen_peer(run)


def _end_frozen_peer(run: Path) -> None:
    """What a job scheduler does once the survivor exits: end the stopped process (it holds our stdout)."""
    signalled = run / "signalled.json"
    if signalled.exists():
        os.kill(json.loads(signalled.read_text())["pid"], signal.SIGKILL)


SCENARIOS = {function.__name__: function for function in (audit, kill, restart, freeze)}

if __name__ == "__main__":
    name, out_dir, *args = sys.argv[1:]
    for directory in ("kill", "restart1", "restart2", "freeze"):
        (Path(out_dir) / directory).mkdir(parents=True, exist_ok=True)
    pl.seed_everything(0)
    SCENARIOS[name](Path(out_dir), *args)
    if name in ("kill", "freeze"):
        sys.exit(f"scenario {name!r}: the fit was expected to fail")
