"""Predictions in dataset order: what one process would have predicted, gathered from all of them
(docs/DESIGN.md, "Exact evaluation"). ``PredictionGatherer`` does it for ``trainer.predict``'s return
value on rank 0; ``ShardPredictionWriter`` merges the processes' files in order on rank 0."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import BasePredictionWriter, Callback
from typing_extensions import override

from lightning_shard.comm.topology import Topology
from lightning_shard.comm.tree import concatenate
from lightning_shard.lightning._private import predict_loader_count, predictions_per_loader
from lightning_shard.lightning.stages import flatten_loaders, is_shard_loader


def merge_in_order(
    parts: Sequence[tuple[int, list[Any]]], split_batches: bool, by_process: bool = False
) -> list[Any]:
    """One list of batch predictions in the order a single process makes them.

    ``parts``: ``(data-parallel index, predictions)`` of every process, an index seen twice counted once.
    ``split_batches``: each step's slices are joined. ``by_process``: the processes read consecutive parts
    of the data (a natively sharded stream), so their predictions follow one another.
    """
    # NOTE: reversed, so that the first of an index's parts is the one kept.
    by_index = {index: list(predictions) for index, predictions in reversed(parts)}
    ordered = [by_index[index] for index in sorted(by_index)]
    if by_process:
        return [prediction for predictions in ordered for prediction in predictions]
    steps = max((len(predictions) for predictions in ordered), default=0)
    merged: list[Any] = []
    for step in range(steps):
        slices = [predictions[step] for predictions in ordered if step < len(predictions)]
        merged += [_joined(slices)] if split_batches else slices
    return merged


def _joined(slices: list[Any]) -> Any:
    if len(slices) == 1:
        return slices[0]
    try:
        return concatenate(slices)
    except (ValueError, TypeError):
        return slices


def _by_process(trainer: pl.Trainer) -> list[bool]:
    """Per predict loader: whether it reads a natively sharded stream (``merge_in_order``'s ``by_process``)."""
    loaders = flatten_loaders(trainer.predict_dataloaders)
    return [is_shard_loader(loader) and loader.kind.source == "shares" for loader in loaders]


class PredictionGatherer(Callback):
    """Makes ``trainer.predict`` return, on rank 0, what a single process would: every process's
    predictions, each sample once, in order. Other ranks keep their own, as under DDP. ``topology`` and
    ``split_batches`` are read when the predict run ends.
    """

    def __init__(self, topology: Callable[[], Topology], split_batches: Callable[[], bool]) -> None:
        self.topology = topology
        self.split_batches = split_batches

    @override
    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # NOTE: runs after `on_predict_epoch_end`, where prediction writers saw this rank's own predictions;
        # the lists `trainer.predict` returns are these same objects, so they are completed in place.
        per_loader, topology = predictions_per_loader(trainer), self.topology()
        if per_loader is None or topology.num_processes == 1:
            return
        split, by_process = self.split_batches(), _by_process(trainer)
        # NOTE: several data-parallel processes, so a process group runs.
        gathered: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object((topology.process_index, [list(p) for p in per_loader]), gathered, dst=0)
        if gathered is None:
            return
        for position, own in enumerate(per_loader):
            parts = [(index, loaders[position]) for index, loaders in gathered]
            own[:] = merge_in_order(parts, split, position < len(by_process) and by_process[position])


class ShardPredictionWriter(BasePredictionWriter):
    """Writes each process's predictions, then merges them on rank 0 into one file, in order.

    Each process writes ``rank{r}.pt`` (its predictions and Lightning's ``batch_indices``) in
    ``output_dir``; after all have written, rank 0 writes ``predictions.pt``: the merged list of batch
    predictions (one list per predict loader when there are several) and the matching batch indices.

    Args:
        output_dir: where to write.
        split_batches: whether the predict loaders split batches across processes (the strategy's
            ``split_batches``).
        keep_parts: keep the per-process files after merging.
    """

    def __init__(
        self, output_dir: str | Path, *, split_batches: bool = False, keep_parts: bool = False
    ) -> None:
        super().__init__(write_interval="epoch")
        self.output_dir = Path(output_dir)
        self.split_batches = split_batches
        self.keep_parts = keep_parts

    @override
    def write_on_epoch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        predictions: Sequence[Any],
        batch_indices: Any,
    ) -> None:
        strategy = trainer.strategy
        topology = getattr(strategy, "topology", None)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        part = {
            "index": topology.process_index if topology is not None else trainer.global_rank,
            "predictions": predictions,
            "batch_indices": batch_indices,
            "several": predict_loader_count(trainer) > 1,
            "by_process": _by_process(trainer),
        }
        own = self.output_dir / f"rank{trainer.global_rank}.pt"
        torch.save(part, own)
        strategy.barrier("lightning_shard.ShardPredictionWriter")
        if trainer.global_rank == 0:
            self._merge(trainer.world_size)
        strategy.barrier("lightning_shard.ShardPredictionWriter.merged")
        if not self.keep_parts:
            own.unlink(missing_ok=True)

    def _merge(self, world_size: int) -> None:
        parts = [
            torch.load(self.output_dir / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)
        ]
        several, by_process = parts[0]["several"], parts[0]["by_process"]
        loaders = len(parts[0]["predictions"]) if several else 1

        def merged(key: str, position: int, nested: bool) -> list[Any]:
            pairs = [(part["index"], part[key][position] if nested else part[key]) for part in parts]
            separate = position < len(by_process) and by_process[position]
            return merge_in_order(pairs, self.split_batches, separate)

        # NOTE: Lightning passes the batch indices per predict loader, the predictions so only with several.
        indices = [merged("batch_indices", position, True) for position in range(loaders)]
        predictions = [merged("predictions", position, several) for position in range(loaders)]
        result = {"predictions": predictions if several else predictions[0]}
        result["batch_indices"] = indices if several else indices[0]
        torch.save(result, self.output_dir / "predictions.pt")
