"""``send_to_device`` (``comm/tree.py``), the per-batch path of every loader: the same object back when
nothing moves, the same structure and types when something does.

A real second device without a GPU: ``meta`` (tensors moved there keep shape and dtype, no data).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, NamedTuple

import pytest
import torch

from lightning_shard.comm.tree import send_to_device

CPU_DEVICES = ("cpu", torch.device("cpu"))


class Pair(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


class Features(dict):
    """A dict subclass that can be rebuilt from a mapping (as ``BatchFeature``-like classes can)."""


class Movable:
    """An object with a ``to`` method, kept as a constant of the tree and moved with the batch."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def to(self, device: Any, non_blocking: bool = False) -> Movable:
        moved = self.tensor.to(device, non_blocking=non_blocking)
        return self if moved is self.tensor else Movable(moved)


def _tensors(count: int) -> list[torch.Tensor]:
    return [torch.arange(4.0) + index for index in range(count)]


def _flat_batches() -> list[Any]:
    a, b, c = _tensors(3)
    return [a, [a, b], (a, b, c), {"x": a, "y": b}]


def _nested_batches() -> list[Any]:
    a, b, c = _tensors(3)
    return [
        Pair(a, b),
        Features(x=a, y=b),
        OrderedDict(x=a, y=b),
        {"x": a, "pair": (b, c), "names": ["s0", "s1"], "id": 3},
        [a, "label"],
        [torch.nn.Parameter(a)],
        {"x": a, "mask": Movable(b)},
    ]


@pytest.mark.parametrize("device", CPU_DEVICES, ids=str)
@pytest.mark.parametrize("non_blocking", [False, True])
@pytest.mark.parametrize(
    "batch", [*_flat_batches(), *_nested_batches(), [], {}], ids=lambda batch: type(batch).__name__
)
def test_a_batch_already_on_the_device_is_returned_itself(
    batch: Any, device: Any, non_blocking: bool
) -> None:
    assert send_to_device(batch, device, non_blocking) is batch


@pytest.mark.parametrize("batch", _flat_batches() + _nested_batches(), ids=lambda batch: type(batch).__name__)
def test_no_device_returns_the_batch_itself(batch: Any) -> None:
    assert send_to_device(batch, None) is batch


def _same_structure(moved: Any, original: Any, device: torch.device) -> None:
    """``moved`` has ``original``'s types, keys and constants, and its tensors (equal shapes) on ``device``."""
    if isinstance(original, torch.Tensor):
        assert isinstance(moved, torch.Tensor), "`Tensor.to` makes a `Parameter` a plain tensor"
        assert moved.device == device and moved.shape == original.shape and moved.dtype == original.dtype
        return
    assert type(moved) is type(original)
    if isinstance(original, dict):
        assert list(moved) == list(original)
        for key in original:
            _same_structure(moved[key], original[key], device)
    elif isinstance(original, (list, tuple)):
        assert len(moved) == len(original)
        for new, old in zip(moved, original, strict=True):
            _same_structure(new, old, device)
    elif isinstance(original, Movable):
        assert moved.tensor.device == device
    else:
        assert moved == original


@pytest.mark.parametrize("device", ["meta", torch.device("meta")], ids=str)
@pytest.mark.parametrize("batch", _flat_batches() + _nested_batches(), ids=lambda batch: type(batch).__name__)
def test_a_batch_that_moves_keeps_its_structure_and_types(batch: Any, device: Any) -> None:
    moved = send_to_device(batch, device)
    _same_structure(moved, batch, torch.device("meta"))
    assert moved is not batch, "a new batch: the user's stays where it was"


def test_a_flat_batch_partly_on_the_device_moves_only_the_rest() -> None:
    here, there = torch.zeros(2, device="meta"), torch.ones(2)
    for batch in ([here, there], (here, there), {"here": here, "there": there}):
        moved = send_to_device(batch, "meta")
        values = list(moved.values()) if isinstance(moved, dict) else list(moved)
        assert type(moved) is type(batch) and values[0] is here and values[1].device.type == "meta"


def test_a_nested_batch_partly_on_the_device_is_rebuilt() -> None:
    here, there = torch.zeros(2, device="meta"), torch.ones(2)
    batch = {"pair": Pair(here, there), "id": 1}
    moved = send_to_device(batch, "meta")
    assert moved is not batch and type(moved["pair"]) is Pair and moved["pair"].x is here
    assert moved["pair"].y.device.type == "meta" and moved["id"] == 1


def test_an_object_that_moves_makes_a_new_batch_even_when_every_tensor_stays() -> None:
    tensor = torch.zeros(2, device="meta")
    batch = {"x": tensor, "mask": Movable(torch.ones(2))}
    moved = send_to_device(batch, "meta")
    assert moved is not batch and moved["x"] is tensor and moved["mask"].tensor.device.type == "meta"
