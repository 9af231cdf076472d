"""What a strided stream's processes compare at each epoch's first fetch: a fingerprint of the first global
batch each of them read, so that a stream that splits itself by rank unrecognised (each process would keep
``1/N`` of its own ``1/N``) is refused (docs/DESIGN.md, "Streams that split themselves"). A fingerprint
covers what identifies an element where it can (identifying keys, else discrete values, else the whole
content), so that random elements (augmentation drawn in ``__iter__``) do not make processes differ.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

IDENTIFYING_KEYS = ("__key__", "id", "idx", "index", "key", "uid", "sample_id")
"""Keys of a mapping element that name the sample (webdataset's ``__key__``, a dataset's ``id`` column)."""

_SHOWN = 4
"""Elements of the first global batch named in a refusal."""


@dataclass(frozen=True)
class Fingerprint:
    """A digest of the first elements a process read (62 bits of a BLAKE2 hash of their identities, or of
    their whole contents ``by_content`` when nothing identified them), and the first few identities ``shown``.
    """

    digest: int
    by_content: bool
    shown: tuple[str, ...]


def fingerprint(elements: Iterable[Any]) -> Fingerprint:
    """The ``Fingerprint`` of ``elements`` (a stream's first global batch)."""
    elements = list(elements)
    identities = [_identity(element) for element in elements]
    by_content = all(identity is None for identity in identities)
    if by_content:
        identities = [_content(element) for element in elements]
    digest = hashlib.blake2b(digest_size=8)
    for identity in identities:
        digest.update(repr(identity).encode() if not isinstance(identity, bytes) else identity)
        digest.update(b"\x00")
    shown = tuple(_short(identity) for identity in identities[:_SHOWN])
    return Fingerprint(int.from_bytes(digest.digest(), "little") >> 2, by_content, shown)


def _identity(element: Any) -> Any:
    """What names ``element``: its identifying keys' values, else its discrete values; ``None`` if nothing."""
    if isinstance(element, Mapping):
        named = [key for key in IDENTIFYING_KEYS if key in element]
        if named:
            return tuple((key, _discrete(element[key]) or _content(element[key])) for key in named)
        parts = [_identity(element[key]) for key in sorted(element, key=str)]
    elif isinstance(element, (list, tuple)):
        parts = [_identity(item) for item in element]
    else:
        return _discrete(element)
    kept = tuple(part for part in parts if part is not None)
    return kept or None


def _discrete(value: Any) -> Any:
    """``value`` as a comparable token if it is discrete (a label, a name, token ids), else ``None``."""
    if isinstance(value, (bool, int, str, bytes)):
        return value
    if isinstance(value, torch.Tensor):
        discrete = not (value.is_floating_point() or value.is_complex())
        return _tensor_bytes(value) if discrete and value.dim() <= 1 else None
    if isinstance(value, np.ndarray | np.generic):
        discrete = value.dtype.kind in "biuSU"
        return value.tobytes() + str(value.dtype).encode() if discrete and value.ndim <= 1 else None
    return None


def _content(value: Any) -> bytes:
    """The whole of ``value`` as bytes (tensors and arrays by their data, anything else pickled)."""
    if isinstance(value, torch.Tensor):
        return _tensor_bytes(value)
    if isinstance(value, np.ndarray):
        return value.tobytes() + str(value.dtype).encode()
    if isinstance(value, Mapping):
        return b"".join(repr(key).encode() + _content(value[key]) for key in sorted(value, key=str))
    if isinstance(value, (list, tuple)):
        return b"".join(_content(item) for item in value)
    try:
        return pickle.dumps(value, protocol=4)
    except Exception:  # noqa: BLE001 - an object that cannot be pickled is compared by its type only
        return type(value).__qualname__.encode()


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().cpu().contiguous()
    raw = flat.view(torch.uint8) if flat.dim() and flat.dtype != torch.bool else flat.to(torch.int64)
    return raw.numpy().tobytes() + str(tuple(tensor.shape)).encode() + str(tensor.dtype).encode()


def _short(identity: Any) -> str:
    text = repr(identity) if not isinstance(identity, bytes) else f"<{len(identity)} bytes>"
    return text if len(text) <= 40 else text[:37] + "..."


class Fingerprinted:
    """The first element a shard yields in an epoch, carrying the fingerprint of its first global batch: it
    travels as an element, ``CollateFingerprinted`` carries it on the batch, and the loader unwraps it (and
    pins, with ``pin_memory=True``: the ``DataLoader``'s pinning leaves an object it does not know as it is).
    """

    __slots__ = ("value", "fingerprint")

    def __init__(self, value: Any, fingerprint: Fingerprint) -> None:
        self.value = value
        self.fingerprint = fingerprint


class CollateFingerprinted:
    """The user's ``collate_fn``, passing a ``Fingerprinted`` first element's fingerprint on to the batch;
    only a batch's first element can be one, so a batch costs one type check."""

    def __init__(self, collate_fn: Any) -> None:
        self.collate_fn = collate_fn

    def __call__(self, batch: Any) -> Any:
        if type(batch) is Fingerprinted:  # NOTE: `batch_size=None`: each element is collated alone
            return Fingerprinted(self.collate_fn(batch.value), batch.fingerprint)
        if type(batch) is list and batch and type(batch[0]) is Fingerprinted:
            marked = batch[0]
            return Fingerprinted(self.collate_fn([marked.value, *batch[1:]]), marked.fingerprint)
        return self.collate_fn(batch)
