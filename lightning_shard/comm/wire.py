"""Point-to-point transfer of one process's slice of a dispatched batch (docs/DESIGN.md, "Scatter dispatch").

A slice travels as a *control* message (a fixed header, then the small tensors' bytes packed together, of a
size both ends know from the slice's layout), then each large tensor on its own, from and into its own
memory. A changed layout follows the header (padded to the expected size) in messages of its own, as do
pickled sequence leaves (strings): a slice whose layout stays costs one message plus one per large tensor.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import torch
import torch.distributed as dist

from lightning_shard.comm.tree import Node, flatten, unflatten

_HEADER_BYTES = 4 * 8
"""Four int64 fields: status, layout bytes, sequence bytes, small-tensor bytes."""
_SMALL_BYTES = 1 << 16
"""Tensors below this size are packed together (fewer messages); larger ones travel alone (no copy)."""

TensorMeta = tuple[torch.dtype, tuple[int, ...]]


class Status(IntEnum):
    BATCH = 0
    LAST = 1
    STOP = 2
    ERROR = 3


@dataclass(frozen=True)
class Layout:
    """What a receiver needs to rebuild a slice: its structure and each tensor's dtype and shape."""

    node: Node
    tensors: tuple[TensorMeta, ...]


def _control_bytes(layout: Layout | None) -> int:
    """The header, and the bytes of the small tensors, which travel packed in the control message."""
    tensors = layout.tensors if layout is not None else ()
    return _HEADER_BYTES + sum(_nbytes(*meta) for meta in tensors if _is_small(*meta))


@dataclass
class Channel:
    """One peer's connection: both ends remember the last layout, so it is sent only when it changes."""

    peer: int
    device: torch.device
    last_layout: Layout | None = None
    bytes_moved: int = 0
    in_flight: list[tuple[Any, torch.Tensor]] = field(default_factory=list)

    # -- sending (process 0) ------------------------------------------------------------------------
    def _send(self, tensor: torch.Tensor) -> None:
        # NOTE: asynchronous, so process 0 loads the next batch while this one travels; a blocking send
        # waits for the peer to be scheduled at every message, which on a busy machine costs milliseconds.
        tensor = tensor.to(self.device)
        self.in_flight.append((dist.isend(tensor, dst=self.peer), tensor))
        self.bytes_moved += tensor.numel() * tensor.element_size()

    def flush(self) -> None:
        """Wait until everything sent so far has been delivered (its tensors are released then)."""
        for work, _ in self.in_flight:
            work.wait()
        self.in_flight.clear()

    def _send_control(self, fields: list[int], small: torch.Tensor | None = None) -> None:
        """The header, with the small tensors' bytes, or padded to the size the peer expects."""
        header = torch.tensor(fields, dtype=torch.int64).view(torch.uint8)
        padding = _control_bytes(self.last_layout) - _HEADER_BYTES
        tail = small if small is not None else torch.zeros(padding, dtype=torch.uint8)
        self._send(torch.cat([header, tail.to(header.device)]) if tail.numel() else header)

    def send_status(self, status: Status, message: str = "") -> None:
        """Send a batch-less message (``STOP``, or ``ERROR`` with its text)."""
        self.flush()
        payload = message.encode()
        self._send_control([int(status), 0, len(payload), 0])
        if payload:
            self._send(_from_bytes(payload))

    def send_batch(self, batch: Any, last: bool) -> None:
        """Send ``batch`` (this peer's slice). At most one batch is in flight per peer."""
        self.flush()
        node, leaves = flatten(batch)
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        sequences = [leaf for leaf in leaves if not isinstance(leaf, torch.Tensor)]
        layout = Layout(node, tuple((t.dtype, tuple(t.shape)) for t in tensors))
        small = _pack([t for t in tensors if _is_small(t.dtype, t.shape)])
        sequence_bytes = pickle.dumps(sequences) if sequences else b""
        status = int(Status.LAST if last else Status.BATCH)
        if layout == self.last_layout:
            self._send_control([status, 0, len(sequence_bytes), small.numel()], small)
        else:
            layout_bytes = pickle.dumps(layout)
            self._send_control([status, len(layout_bytes), len(sequence_bytes), small.numel()])
            self._send(_from_bytes(layout_bytes))
            self.last_layout = layout
            if small.numel():
                self._send(small)
        if sequence_bytes:
            self._send(_from_bytes(sequence_bytes))
        for tensor in tensors:
            if not _is_small(tensor.dtype, tensor.shape):
                self._send(_as_bytes(tensor.detach().contiguous()))

    # -- receiving (the other processes) ------------------------------------------------------------
    def _recv(self, shape: int | tuple[int, ...], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        """Receive a tensor straight into its own memory."""
        tensor = torch.empty(shape, dtype=dtype, device=self.device)
        dist.recv(_as_bytes(tensor), src=self.peer)
        self.bytes_moved += tensor.numel() * tensor.element_size()
        return tensor

    def receive(self) -> tuple[Status, Any]:
        """Receive one slice: ``(status, batch)``, or ``(ERROR, text)``, or ``(STOP, "")``."""
        control = self._recv(_control_bytes(self.last_layout))
        status, layout_size, sequence_size, small_size = control[:_HEADER_BYTES].view(torch.int64).tolist()
        if Status(status) in (Status.STOP, Status.ERROR):
            return Status(status), _bytes(self._recv(sequence_size)).decode() if sequence_size else ""
        small = control[_HEADER_BYTES:]
        if layout_size:
            self.last_layout = pickle.loads(_bytes(self._recv(layout_size)))
            small = self._recv(small_size) if small_size else small[:0]
        layout = self.last_layout
        assert layout is not None  # NOTE: the first slice always carries its layout.
        sequences = iter(pickle.loads(_bytes(self._recv(sequence_size))) if sequence_size else [])
        tensors = self._tensors(small, layout.tensors)
        leaves = [next(tensors) if kind == "tensor" else next(sequences) for kind in _leaf_kinds(layout.node)]
        return Status(status), unflatten(layout.node, leaves)

    def _tensors(self, small: torch.Tensor, metas: tuple[TensorMeta, ...]) -> Iterator[torch.Tensor]:
        """The slice's tensors in order: the small ones cut from ``small`` (the control message's packed bytes),
        each large one received on its own as it comes, in the order ``send_batch`` sent them."""
        offset = 0
        for dtype, shape in metas:
            if not _is_small(dtype, shape):
                yield self._recv(shape, dtype)
                continue
            nbytes = _nbytes(dtype, shape)
            yield small[offset : offset + nbytes].clone().view(dtype).reshape(shape)
            offset += nbytes


def _bytes(tensor: torch.Tensor) -> bytes:
    return tensor.cpu().numpy().tobytes()


def _from_bytes(blob: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


def _leaf_kinds(node: Node) -> list[str]:
    if node.kind in ("tensor", "seq"):
        return [node.kind]
    return [kind for child in node.children for kind in _leaf_kinds(child)]


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...] | torch.Size) -> int:
    return math.prod(shape) * dtype.itemsize


def _is_small(dtype: torch.dtype, shape: tuple[int, ...] | torch.Size) -> bool:
    return _nbytes(dtype, shape) < _SMALL_BYTES


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A flat ``uint8`` view of a contiguous tensor (any dtype travels as bytes)."""
    return tensor.reshape(-1).view(torch.uint8)


def _pack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """All tensors' bytes in one flat ``uint8`` buffer."""
    if not tensors:
        return torch.empty(0, dtype=torch.uint8)
    device = tensors[0].device
    parts = [_as_bytes(t.detach().to(device).contiguous()) for t in tensors]
    return torch.cat(parts) if len(parts) > 1 else parts[0]
