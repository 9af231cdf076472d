"""The loaders of each Lightning stage: which options they get and how they are built."""

from __future__ import annotations

from typing import Any, TypeGuard

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.data import sized_len
from lightning.pytorch.trainer.states import RunningStage
from torch.utils.data import DataLoader

from lightning_shard.comm.collectives import all_gather_objects
from lightning_shard.comm.topology import Topology
from lightning_shard.lightning._private import record_batch_indices, unwrap_index_batch_sampler
from lightning_shard.loaders.base import loader_settings, rebuilt_as_user_class
from lightning_shard.loaders.kinds import is_prepared
from lightning_shard.loaders.position import OWN, SHORTEST, StreamEnds
from lightning_shard.loaders.shard import DataLoaderDispatcher, DataLoaderShard
from lightning_shard.options import ShardOptions
from lightning_shard.prepare import prepare_with_options
from lightning_shard.sampling.balance import BALANCED

ShardLoader = DataLoaderShard | DataLoaderDispatcher


def is_shard_loader(loader: object) -> TypeGuard[ShardLoader]:
    """Whether ``loader`` was built by ``prepare_data_loader``."""
    return is_prepared(loader)


STAGES = ("train", "validate", "test", "predict")
"""The keys of per-stage options, e.g. in ``ShardDataModule.shard_options(stage)``."""


_RUNNING_STAGES = {
    RunningStage.TRAINING: ("train", "train_dataloader"),
    RunningStage.SANITY_CHECKING: ("validate", "val_dataloaders"),
    RunningStage.VALIDATING: ("validate", "val_dataloaders"),
    RunningStage.TESTING: ("test", "test_dataloaders"),
    RunningStage.PREDICTING: ("predict", "predict_dataloaders"),
}
"""Each running stage of Lightning: its options key and the trainer attribute that holds its loaders."""


def stage_key(stage: RunningStage | None) -> str:
    """The options key (``"train"``, ``"validate"``, ``"test"``, ``"predict"``) of a running stage."""
    return "train" if stage is None else _RUNNING_STAGES[stage][0]


def running_loaders(trainer: pl.Trainer) -> list[Any]:
    """The loaders of the stage ``trainer`` runs, flattened (none outside a stage)."""
    stage = trainer.state.stage
    if stage is None:
        return []
    return flatten_loaders(getattr(trainer, _RUNNING_STAGES[stage][1]))


def stage_defaults(options: ShardOptions, stage: str) -> ShardOptions:
    """The strategy's options as ``stage`` uses them before any per-stage override: validation and test
    balanced, predict neither padding nor dispatching (docs/DESIGN.md, "Exact evaluation")."""
    if stage in ("validate", "test"):
        return options.replace(even_batches=BALANCED)
    if stage == "predict":
        return options.replace(even_batches=False, dispatch_batches=False)
    return options


def prepare_for_stage(
    dataloader: DataLoader, options: ShardOptions, topology: Topology, stage: str, device: torch.device
) -> DataLoader:
    """``dataloader`` sharded with ``options`` for ``stage``."""
    # NOTE: a stream predicted has no end agreement: each process predicts its whole part of it, once (the
    # classifier reads `uneven_streams` for a stream only). Lightning records the indices of map-style data.
    uneven: StreamEnds = OWN if stage == "predict" else SHORTEST
    inner = unwrap_index_batch_sampler(dataloader.batch_sampler) if stage == "predict" else None
    if inner is None:
        return prepare_with_options(dataloader, options, topology, device=device, uneven_streams=uneven)
    plain = DataLoader(dataloader.dataset, batch_sampler=inner, **loader_settings(dataloader))
    shard = prepare_with_options(plain, options, topology, device=device)
    assert not shard.kind.dispatch  # NOTE: `stage_defaults` turns dispatch off for predict.
    # NOTE: the loader below iterates the shard's batch sampler itself, so it must do the shard's one
    # start-of-iteration job here: give every process the same random order (predict runs once).
    shard.source.synchronize()
    recorded = record_batch_indices(shard.batch_sampler)
    # NOTE: of the user's class (a `DataLoader` subclass keeps its behaviour), with its attributes.
    return rebuilt_as_user_class(dataloader, shard.dataset, batch_sampler=recorded, **loader_settings(shard))


def check_even_training(loader: DataLoader, options: ShardOptions, topology: Topology) -> None:
    """Refuse (``ValueError``) a training loader that would give processes different numbers of steps."""
    problem = uneven_steps(loader, options, topology)
    if problem is not None:
        raise ValueError(problem)


def uneven_steps(loader: DataLoader, options: ShardOptions, topology: Topology) -> str | None:
    """Why the processes would take different numbers of steps through ``loader``, or ``None``: a collective,
    so every process calls it."""
    if options.even_batches or topology.num_processes == 1:
        return None
    if is_shard_loader(loader) and loader.kind.dispatch and loader.kind.stream and sized_len(loader) is None:
        return (
            "`even_batches=False` with `dispatch_batches=True` over a stream without a length: the last global "
            "batch leaves some processes no rows, so they would stop a step early while the others wait in "
            "DDP's gradient all-reduce, forever, and the stream's length cannot tell beforehand. Use "
            "`even_batches=True` (the default; the last step is padded with the epoch's first rows), "
            "`DataLoader(drop_last=True)`, or `dispatch_batches=False`."
        )
    everyone = all_gather_objects(sized_len(loader))
    # NOTE: one length per data-parallel index (under a mesh its other ranks hold the same batches).
    lengths = everyone if topology.rank_indices is None else [everyone[rank] for rank in topology.leaders]
    if len(set(lengths)) <= 1:
        return None
    return (
        f"`even_batches=False` gives the training processes {lengths} batches per epoch; the processes "
        "with fewer would stop while the others wait in DDP's gradient all-reduce, forever. Use "
        "`even_batches=True` (the default; the last step is padded with samples from the start of "
        'the epoch), `even_batches="balanced"` (map-style data: the last step split into real samples, '
        "none repeated), or `DataLoader(drop_last=True)` to drop the incomplete last batch."
    )


def flatten_loaders(loaders: Any) -> list[Any]:
    """The loaders in ``trainer.*_dataloaders`` (one, or a list / tuple / dict of them), in order."""
    if isinstance(loaders, dict):
        loaders = list(loaders.values())
    if isinstance(loaders, (list, tuple)):
        return [leaf for value in loaders for leaf in flatten_loaders(value)]
    return [] if loaders is None else [loaders]
