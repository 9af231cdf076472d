"""Training iterables the strategy leaves as they are (not a ``DataLoader`` nor a recognised pipeline): at the
first batch of each iteration the processes compare a digest of it, and stop together, before any step, when it
is the same on every process (docs/DESIGN.md, "Iterables left as they are")."""

from __future__ import annotations

import reprlib
from collections.abc import Iterator
from typing import Any

import torch

from lightning_shard.comm.collectives import batch_digest, same_on_every_process
from lightning_shard.loaders.position import LeftAsItIs

_END = object()


class FirstBatchChecked:
    """``iterable``, yielded as it is once its processes' first batches differ; its ``len()``, and its
    ``sampler`` / ``batch_sampler`` for Lightning's epoch setting, are the iterable's own.

    Raises (while iterated):
        ValueError: on every process, when every one of the ``num_processes`` processes read the same first
            batch (each sample would be trained ``num_processes`` times).
    """

    def __init__(self, iterable: Any, found: LeftAsItIs, num_processes: int) -> None:
        self.iterable = iterable
        self.found = found
        self.num_processes = num_processes

    def __iter__(self) -> Iterator[Any]:
        batches = iter(self.iterable)
        first = next(batches, _END)
        digest = None if first is _END else batch_digest(first)
        if same_on_every_process(digest):
            raise ValueError(_same_everywhere(self.found.name, first, self.num_processes))
        if first is _END:
            return
        yield first
        yield from batches

    def __len__(self) -> int:
        # NOTE: `sized_len` (Lightning's) reads the `TypeError` of an iterable without one as "no length".
        return len(self.iterable)

    def __getattr__(self, name: str) -> Any:
        """The iterable's own attributes (``sampler`` / ``batch_sampler``, which Lightning sets the epoch on)."""
        # NOTE: not while unpickling, before `iterable` is set.
        if name.startswith("__") or name == "iterable":
            raise AttributeError(name)
        return getattr(self.iterable, name)


class StatefulFirstBatchChecked(FirstBatchChecked):
    """``FirstBatchChecked`` of an iterable with ``state_dict`` / ``load_state_dict``: Lightning saves its state."""

    def state_dict(self) -> dict[str, Any]:
        return dict(self.iterable.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.iterable.load_state_dict(state_dict)


def checked(iterable: Any, found: LeftAsItIs, num_processes: int) -> FirstBatchChecked:
    """``iterable`` wrapped so its processes compare their first batches (saved as its own state if it has one)."""
    wrapper = StatefulFirstBatchChecked if found.stateful else FirstBatchChecked
    return wrapper(iterable, found, num_processes)


def _same_everywhere(name: str, batch: Any, num_processes: int) -> str:
    return (
        f"The training iterable `{name}` is not a `DataLoader`, so lightning_shard left it as it is, and every one "
        f"of the {num_processes} processes read the same first batch ({_seen(batch)}): each sample would be "
        f"trained {num_processes} times, once on each process. Return a `DataLoader` (the strategy shards it) or "
        "a recognised pipeline (a torchdata.nodes `Loader` rooted in a `SamplerWrapper` or `IterableWrapper`), or "
        f"split `{name}` by rank yourself; if every process is meant to read all of it, declare "
        f"`splits_by_rank = False` on it (and `splits_by_rank = True` if it splits itself by rank)."
    )


def _seen(batch: Any) -> str:
    if isinstance(batch, dict):
        return "a dict {" + ", ".join(f"{key!r}: {_leaf(value)}" for key, value in batch.items()) + "}"
    if isinstance(batch, (list, tuple)):
        items = ", ".join(_leaf(value) for value in batch[:4])
        return f"a {type(batch).__name__} of {len(batch)}: [{items}]"
    return _leaf(batch)


def _leaf(value: Any) -> str:
    """A tensor by its shape (and its values, when one-dimensional: ids, labels), anything else shortened."""
    if isinstance(value, torch.Tensor):
        values = f" {reprlib.repr(value.tolist())}" if value.dim() <= 1 else ""
        return f"a tensor of shape {tuple(value.shape)}{values}"
    return reprlib.repr(value)
