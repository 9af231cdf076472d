"""What a strided stream's processes compare at growing intervals: a digest of a global batch each of them
read, so that a stream that splits itself by rank unrecognised (each process would keep ``1/N`` of its own
``1/N``) is refused (docs/DESIGN.md, "Streams that split themselves"). A digest covers the values of an
element's identifying keys where it has any (``__key__``, ``id``, ...), else its whole contents: a shared
label or tag never stands for the element.
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

DIGEST_BITS = 20
"""Bits of a digest: the agreement sums each digest and its square over the group in 64-bit integers, which
holds for up to ``2 ** (63 - 2 * DIGEST_BITS)`` processes."""

_SHOWN = 4
"""Elements of a global batch named in a refusal."""


def checked_step(step: int) -> bool:
    """Whether the global batch ``step`` of a worker's (or the main process's) epoch is compared: the first
    two, then at doubling intervals (``0, 1, 3, 7, 15, ...``), so a stream that splits itself after its
    first global batch is still found, at a cost that grows with the log of the epoch's length."""
    return (step + 1) & step == 0 or step == 1


@dataclass(frozen=True)
class Fingerprint:
    """A digest of a global batch (``DIGEST_BITS`` of a BLAKE2 hash of its elements' identities, or of their
    whole contents ``by_content`` when no identifying key names them, never 0), and its first few elements
    as ``shown`` in a refusal."""

    digest: int
    by_content: bool
    shown: tuple[str, ...]


def fingerprint(elements: Iterable[Any]) -> Fingerprint:
    """The ``Fingerprint`` of ``elements`` (a global batch)."""
    elements = list(elements)
    keys = [_keys(element) for element in elements]
    by_content = any(key is None for key in keys)
    identities = elements if by_content else keys
    digest = hashlib.blake2b(digest_size=8)
    for identity in identities:
        _feed(digest, identity)
        digest.update(b"\x00")
    shown = tuple(text if len(text) <= 60 else text[:57] + "..." for text in map(_shown, identities[:_SHOWN]))
    value = int.from_bytes(digest.digest(), "little") % ((1 << DIGEST_BITS) - 1) + 1
    return Fingerprint(value, by_content, shown)


def _keys(element: Any) -> dict[str, Any] | None:
    """The identifying keys of a mapping ``element`` and their values (``None``: nothing names it)."""
    if not isinstance(element, Mapping):
        return None
    named = {key: element[key] for key in IDENTIFYING_KEYS if key in element}
    return named or None


def _feed(digest: Any, value: Any) -> None:
    """Hash the whole of ``value``: tensors and arrays by their data, shape and type, containers item by item,
    anything else pickled."""
    kind = type(value)
    if kind in _PLAIN:
        digest.update(f"{kind.__name__}:{value!r}".encode())
        return
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        try:
            value = value.numpy()
        except TypeError:  # NOTE: a dtype NumPy lacks (bfloat16): its bytes as they are
            value = value.contiguous().reshape(-1).view(torch.uint8).numpy()
    if isinstance(value, np.ndarray):
        digest.update(np.ascontiguousarray(value).view(np.uint8))
        digest.update(f"{value.shape}{value.dtype.str}".encode())
    elif isinstance(value, (dict, Mapping)):
        for key in sorted(value, key=str):
            digest.update(repr(key).encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            _feed(digest, item)
        digest.update(b"]")
    else:
        try:
            digest.update(pickle.dumps(value, protocol=4))
        except Exception:  # noqa: BLE001 - an object that cannot be pickled is compared by its type only
            digest.update(type(value).__qualname__.encode())


_PLAIN = frozenset((int, str, float, bool, bytes, type(None)))


def _shown(value: Any) -> str:
    """``value`` as a refusal shows it (``fingerprint`` cuts it at 60 characters): the identifying keys as
    written, contents abbreviated."""
    if isinstance(value, torch.Tensor):
        head = value.detach().flatten()[:4].tolist()
        return f"tensor({head if value.numel() > 4 else value.tolist()}{'...' if value.numel() > 4 else ''})"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key!r}: {_shown(item)}" for key, item in value.items()) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_shown(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


@dataclass(eq=False, slots=True)
class Fingerprinted:
    """The first element a shard yields of a compared global batch, carrying that batch's fingerprint: it
    travels as an element, ``CollateFingerprinted`` carries it on the batch, and the loader unwraps it (and
    pins, with ``pin_memory=True``: the ``DataLoader``'s pinning leaves an object it does not know as it is).
    """

    value: Any
    fingerprint: Fingerprint


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
