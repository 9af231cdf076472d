"""Where each process's random states go in a checkpoint: process 0's in the checkpoint, every other
process's in a file of its own beside it, ``<checkpoint>.random_states/rank_<r>.pt`` (or
``random_states/rank_<r>.pt`` inside a checkpoint directory; docs/DESIGN.md, "Random states on resume")."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.utilities.cloud_io import get_filesystem

from lightning_shard.comm.collectives import global_rank, world_size
from lightning_shard.comm.random_states import PER_PROCESS

Location = str | Path
"""A checkpoint's path or URL, as Lightning takes it."""

KEY = "lightning_shard.random_states"
"""The key of the random states in a checkpoint: a callback's state key, or a key ``fabric.save`` writes."""
FOLDER = "random_states"
"""The folder of the other processes' states: ``<checkpoint>.random_states`` or ``<checkpoint>/random_states``."""
PART = "rank_{}.pt"
"""The file of one process's states in that folder, by its global rank."""


def name_checkpoint(entry: dict[str, Any] | None, path: Location) -> None:
    """Record in ``entry`` the name of the checkpoint it is saved with (before the checkpoint is written)."""
    if entry is not None:
        entry["checkpoint"] = os.path.basename(_text(path))


def write_own(
    io: CheckpointIO, path: Location, entry: dict[str, Any] | None, storage_options: Any = None
) -> None:
    """Write this process's ``entry`` beside the checkpoint at ``path``, once it is written; process 0's
    is in the checkpoint itself."""
    if entry is None or entry.get("rank", 0) == 0:
        return
    part = os.path.join(_folder(path), PART.format(entry["rank"]))
    io.save_checkpoint(entry, part, storage_options=storage_options)


def read_own(io: CheckpointIO, path: Location, entry: dict[str, Any], **load_options: Any) -> dict[str, Any]:
    """``entry``, or where it is another process's states saved by as many processes, this process's own,
    read from beside the checkpoint with ``load_options`` (a warning when they are not there)."""
    rank = global_rank()
    saved_per_process = entry.get("version") == PER_PROCESS and entry.get("world_size") == world_size()
    if not saved_per_process or entry.get("rank") == rank:
        return entry
    candidates = [os.path.join(folder, PART.format(rank)) for folder in _folders(path, entry)]
    for part in candidates:
        if get_filesystem(part).exists(part):
            return io.load_checkpoint(part, **load_options)
    warnings.warn(
        f"lightning_shard: process {rank}'s random states are not beside the checkpoint `{path}` (looked for "
        f"{' and '.join(f'`{part}`' for part in candidates)}), so its random streams start afresh. Copy or "
        f"move the checkpoint's `.{FOLDER}` folder with it.",
        stacklevel=2,
    )
    return entry


def remove_others(io: CheckpointIO, path: Location, is_global_zero: bool) -> None:
    """Remove the other processes' states beside the checkpoint file at ``path`` (process 0, once Lightning
    removed the checkpoint; those inside a checkpoint directory went with it)."""
    folder = _beside(path)
    if is_global_zero and get_filesystem(folder).exists(folder):
        io.remove_checkpoint(folder)


def _folders(path: Location, entry: Mapping[str, Any]) -> list[str]:
    """Where the other processes' states of the checkpoint at ``path`` may be: inside it (a directory),
    beside it under its name, or beside it under the name it was saved as (``path`` is a link or a copy)."""
    folder = _folder(path)
    saved_as = entry.get("checkpoint")
    if folder != _beside(path) or not isinstance(saved_as, str):
        return [folder]
    under_saved_name = _beside(os.path.join(os.path.dirname(_text(path)), saved_as))
    return list(dict.fromkeys([folder, under_saved_name]))


def _folder(path: Location) -> str:
    """The folder of the other processes' states: inside a checkpoint directory, else beside the file."""
    text = _text(path)
    return os.path.join(text, FOLDER) if get_filesystem(text).isdir(text) else _beside(text)


def _beside(path: Location) -> str:
    return f"{_text(path)}.{FOLDER}"


def _text(path: Location) -> str:
    """``path`` as a string without a trailing separator (a URL stays a URL)."""
    return os.fspath(path).rstrip("/") or "/"
