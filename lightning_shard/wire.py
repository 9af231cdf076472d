"""Point-to-point transfer of one process's slice of a dispatched batch (SPEC D3).

Each message starts with a fixed header. The slice's structure (nesting, dtypes, shapes) follows only
when it differs from the one last sent to that process; then come non-tensor sequence leaves (if any),
the bytes of all small tensors packed into one buffer, and each large tensor on its own, sent from and
received into its own memory (no copy on either side). A slice of small tensors costs two or three
messages however nested.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import torch
import torch.distributed as dist

from lightning_shard.structure import Node, flatten, unflatten

_HEADER_FIELDS = 4
_SMALL_BYTES = 1 << 16
"""Tensors below this size are packed together (fewer messages); larger ones travel alone (no copy)."""


class Status(IntEnum):
    BATCH = 0
    LAST = 1
    STOP = 2
    ERROR = 3


@dataclass(frozen=True)
class Layout:
    """What a receiver needs to rebuild a slice: its structure and each tensor's dtype and shape."""

    node: Node
    tensors: tuple[tuple[torch.dtype, tuple[int, ...]], ...]


@dataclass
class Channel:
    """One peer's connection: remembers the last layout so it is sent only when it changes."""

    peer: int
    device: torch.device
    last_layout: Layout | None = None
    bytes_moved: int = 0

    def _send(self, tensor: torch.Tensor) -> None:
        dist.send(tensor.to(self.device), dst=self.peer)
        self.bytes_moved += tensor.numel() * tensor.element_size()

    def _recv_tensor(self, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        """Receive a large tensor straight into its own memory."""
        tensor = torch.empty(shape, dtype=dtype, device=self.device)
        dist.recv(_as_bytes(tensor), src=self.peer)
        self.bytes_moved += tensor.numel() * tensor.element_size()
        return tensor

    def _recv(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        tensor = torch.empty(numel, dtype=dtype, device=self.device)
        dist.recv(tensor, src=self.peer)
        self.bytes_moved += tensor.numel() * tensor.element_size()
        return tensor

    def send_status(self, status: Status, message: str = "") -> None:
        """Send a batch-less message (``STOP``, or ``ERROR`` with its text)."""
        payload = message.encode()
        self._send(torch.tensor([int(status), 0, len(payload), 0], dtype=torch.int64))
        if payload:
            self._send(torch.frombuffer(bytearray(payload), dtype=torch.uint8))

    def send_batch(self, batch: Any, last: bool) -> None:
        """Send ``batch`` (this peer's slice): header, layout if changed, sequences, tensor bytes."""
        node, leaves = flatten(batch)
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        sequences = [leaf for leaf in leaves if not isinstance(leaf, torch.Tensor)]
        layout = Layout(node, tuple((t.dtype, tuple(t.shape)) for t in tensors))
        layout_bytes = b"" if layout == self.last_layout else pickle.dumps(layout)
        self.last_layout = layout
        sequence_bytes = pickle.dumps(sequences) if sequences else b""
        data = _pack([t for t in tensors if _is_small(t.dtype, t.shape)])
        status = Status.LAST if last else Status.BATCH
        header = [int(status), len(layout_bytes), len(sequence_bytes), data.numel()]
        self._send(torch.tensor(header, dtype=torch.int64))
        for blob in (layout_bytes, sequence_bytes):
            if blob:
                self._send(torch.frombuffer(bytearray(blob), dtype=torch.uint8))
        if data.numel():
            self._send(data)
        for tensor in tensors:
            if not _is_small(tensor.dtype, tensor.shape):
                self._send(_as_bytes(tensor.detach().contiguous()))

    def receive(self) -> tuple[Status, Any]:
        """Receive one message: ``(status, batch)``, or ``(ERROR, text)``, or ``(STOP, None)``."""
        status, layout_size, sequence_size, data_size = self._recv(_HEADER_FIELDS, torch.int64).tolist()
        if Status(status) in (Status.STOP, Status.ERROR):
            text = _bytes(self._recv(sequence_size, torch.uint8)).decode() if sequence_size else ""
            return Status(status), text
        if layout_size:
            self.last_layout = pickle.loads(_bytes(self._recv(layout_size, torch.uint8)))
        assert self.last_layout is not None  # NOTE: the first batch always carries its layout.
        sequences = pickle.loads(_bytes(self._recv(sequence_size, torch.uint8))) if sequence_size else []
        data = self._recv(data_size, torch.uint8) if data_size else torch.empty(0, dtype=torch.uint8)
        metas = self.last_layout.tensors
        small = iter(_unpack(data, tuple(meta for meta in metas if _is_small(*meta))))
        tensors = iter([next(small) if _is_small(*meta) else self._recv_tensor(*meta) for meta in metas])
        sequences_iter = iter(sequences)
        node, leaf_kinds = self.last_layout.node, _leaf_kinds(self.last_layout.node)
        leaves = [next(tensors) if kind == "tensor" else next(sequences_iter) for kind in leaf_kinds]
        return Status(status), unflatten(node, leaves)


def _bytes(tensor: torch.Tensor) -> bytes:
    return tensor.cpu().numpy().tobytes()


def _leaf_kinds(node: Node) -> list[str]:
    if node.kind in ("tensor", "seq"):
        return [node.kind]
    return [kind for child in node.children for kind in _leaf_kinds(child)]


def _is_small(dtype: torch.dtype, shape: tuple[int, ...] | torch.Size) -> bool:
    return math.prod(shape) * _itemsize(dtype) < _SMALL_BYTES


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


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


def _unpack(data: torch.Tensor, metas: tuple[tuple[torch.dtype, tuple[int, ...]], ...]) -> list[torch.Tensor]:
    tensors, offset = [], 0
    for dtype, shape in metas:
        nbytes = math.prod(shape) * _itemsize(dtype)
        chunk = data[offset : offset + nbytes].clone()
        tensors.append(chunk.view(dtype).reshape(shape))
        offset += nbytes
    return tensors
