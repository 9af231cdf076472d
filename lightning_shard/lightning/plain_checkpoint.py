"""A checkpoint written under a ``Shard*`` strategy, made one that plain Lightning resumes from
(``to_plain_checkpoint``; on the command line, ``python -m lightning_shard.lightning.to_plain``;
docs/DESIGN.md, "Elastic resume")."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch

from lightning_shard.lightning._private import (
    remove_saved_loader_states,
    saved_callback_states,
    saved_loader_states,
)
from lightning_shard.lightning.audit_callback import ShardAuditCallback
from lightning_shard.lightning.epoch_callback import ShardRandomStatesCallback
from lightning_shard.loaders.state import STATE_FORMAT

OUR_CALLBACK_KEYS = (ShardRandomStatesCallback().state_key, ShardAuditCallback.__qualname__)
"""The keys (``Callback.state_key``) under which our callbacks keep their state in a checkpoint."""
META_FILE = "meta.pt"
"""The file of the loops' and callbacks' states in a sharded checkpoint directory, as Lightning names it."""


def to_plain_checkpoint(
    source: str | os.PathLike[str], destination: str | os.PathLike[str], *, weights_only: bool = True
) -> list[str]:
    """Write ``source``, a Lightning checkpoint written under a ``Shard*`` strategy, to ``destination``
    without what only lightning_shard reads, so that plain Lightning (``Trainer(strategy="ddp")``, no
    lightning_shard installed) resumes from it; return what was removed, one line each.

    Kept: the model, the optimizers, the learning-rate schedulers, the loops' progress (epoch, global step,
    the batch within the epoch) and every other callback's state. Lost: the training loaders' exact
    position (a checkpoint written mid-epoch resumes at its batch count with a new order, as plain
    Lightning does) and each process's saved random states. ``source`` may be ``destination``; for a
    sharded checkpoint (a directory), convert the ``meta.pt`` in a copy of it.

    Args:
        source: the checkpoint file to convert.
        destination: where to write the plain checkpoint.
        weights_only: passed to ``torch.load``; ``False`` only for a checkpoint you trust that holds
            other objects than tensors and plain data (hyper-parameters of your own classes).

    Raises:
        FileNotFoundError: if ``source`` does not exist.
        ValueError: if ``source`` is a directory or not a Lightning checkpoint, or ``weights_only=True``
            cannot read it.
    """
    source, destination = Path(source), Path(destination)
    if not source.exists():
        raise FileNotFoundError(
            f"`source`: no checkpoint at {str(source)!r}. Pass the `.ckpt` file to convert."
        )
    if source.is_dir():
        raise ValueError(
            f"`source` {str(source)!r} is a directory: a sharded checkpoint (`ShardModelParallelStrategy`, or "
            f"`state_dict_type=\"sharded\"`), whose loops' and callbacks' states are in its {META_FILE!r}. "
            f"Copy the directory, then convert that file in place: source and destination "
            f"`COPY/{META_FILE}`."
        )
    try:
        checkpoint = torch.load(source, map_location="cpu", weights_only=weights_only)
    except pickle.UnpicklingError as error:
        raise ValueError(
            f"`torch.load(weights_only=True)` cannot read {str(source)!r}: it holds objects other than tensors "
            f"and plain data ({error}). If you trust the file, pass `weights_only=False` (on the command "
            "line, `--no-weights-only`)."
        ) from error
    if not isinstance(checkpoint, dict) or ("state_dict" not in checkpoint and "loops" not in checkpoint):
        raise ValueError(
            f"`source` {str(source)!r} is not a Lightning checkpoint (no `state_dict` or `loops`). Pass a file "
            "written by `Trainer.save_checkpoint` or `ModelCheckpoint`."
        )
    removed = plain_checkpoint(checkpoint)
    torch.save(checkpoint, destination)
    return removed


def plain_checkpoint(checkpoint: dict[str, Any]) -> list[str]:
    """Remove from ``checkpoint`` (a loaded Lightning checkpoint, changed in place) what only
    lightning_shard reads; return what was removed, one line each (see ``to_plain_checkpoint``)."""
    removed = []
    states = saved_loader_states(checkpoint)
    if any(isinstance(state, dict) and state.get("format") == STATE_FORMAT for state in states):
        # NOTE: all of them: Lightning pairs states with the fit's stateful loaders by position.
        remove_saved_loader_states(checkpoint)
        removed.append(f"the training loaders' positions ({len(states)} loader state(s) of the fit loop)")
    callbacks = saved_callback_states(checkpoint)
    for key in OUR_CALLBACK_KEYS:
        if key in callbacks:
            del callbacks[key]
            removed.append(f"the state of the callback {key!r}")
    return removed
