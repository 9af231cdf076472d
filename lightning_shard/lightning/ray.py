"""Ray Train: ``RayShardStrategy``, ``ShardReportCallback`` and ``restored_checkpoint`` (docs/guides/
multi-machine.md, "Ray Train"). Needs the ``ray`` extra; ``import lightning_shard`` does not import it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Checkpoint
from typing_extensions import override

from lightning_shard.lightning.strategy import ShardStrategy

try:
    import ray.train
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        '`lightning_shard.lightning.ray` needs Ray Train: `pip install "lightning_shard[ray]"` (or '
        '`pip install "ray[train]"`).'
    ) from error

CHECKPOINT_NAME = "checkpoint.ckpt"
"""The file name of the Lightning checkpoint inside each reported Ray checkpoint."""


class RayShardStrategy(ShardStrategy, RayDDPStrategy):  # type: ignore[misc]
    """``ShardStrategy`` for Ray Train's ``prepare_trainer``: Ray's DDP strategy with our sharding.

    Args:
        cluster_environment: default ``RayLightningEnvironment()``, Ray's ranks and world size.
        **kwargs: every ``ShardStrategy`` option, and ``DDPStrategy``'s arguments.
    """

    def __init__(self, *, cluster_environment: Any = None, **kwargs: Any) -> None:
        environment = RayLightningEnvironment() if cluster_environment is None else cluster_environment
        super().__init__(cluster_environment=environment, **kwargs)


class ShardReportCallback(Checkpoint):
    """Saves a checkpoint every ``every_n_train_steps`` optimizer steps and reports it to Ray Train.

    A ``Checkpoint`` callback, so Lightning runs it after the others at each batch's end and adds no
    ``ModelCheckpoint`` beside it (leave ``enable_checkpointing`` at its default: Lightning refuses a
    checkpoint callback without it). Every rank calls ``ray.train.report``; rank 0 writes the file.

    Args:
        every_n_train_steps: optimizer steps between two checkpoints (what a restart redoes at most).

    Raises:
        ValueError: if ``every_n_train_steps`` is below 1.
    """

    def __init__(self, every_n_train_steps: int = 1) -> None:
        if every_n_train_steps < 1:
            raise ValueError(
                f"`every_n_train_steps` must be at least 1, got {every_n_train_steps}. It is the number of "
                "optimizer steps between two reported checkpoints."
            )
        self.every_n_train_steps = every_n_train_steps
        self._last_step = -1

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step % self.every_n_train_steps or step == self._last_step:
            return  # NOTE: with gradient accumulation a step's batches end with the same `global_step`
        self._last_step = step
        metrics: dict[str, Any] = {"step": step, "epoch": trainer.current_epoch}
        metrics.update({name: float(value) for name, value in trainer.callback_metrics.items()})
        with tempfile.TemporaryDirectory() as directory:
            trainer.save_checkpoint(os.path.join(directory, CHECKPOINT_NAME))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory))


@contextmanager
def restored_checkpoint() -> Iterator[str | None]:
    """The Lightning checkpoint Ray restarted this worker group from (``None`` on a first start).

    Call ``trainer.fit(..., ckpt_path=path)`` inside the ``with``: the file exists only there.
    """
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        yield None
        return
    with checkpoint.as_directory() as directory:
        yield os.path.join(directory, CHECKPOINT_NAME)
