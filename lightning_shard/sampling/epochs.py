"""Epoch propagation: ``set_epoch`` must reach the sampler through every wrapper in between (docs/DESIGN.md, "Epoch purity")."""

from __future__ import annotations

from typing import Any

_CHILD_ATTRIBUTES = ("batch_sampler", "sampler")


def forward_epoch(child: Any, epoch: int) -> None:
    """Set ``epoch`` on ``child`` and, through objects without ``set_epoch``, on what they wrap.

    A wrapper that defines ``set_epoch`` forwards it itself, so the walk stops there; a plain
    ``torch.utils.data.BatchSampler`` has no ``set_epoch``, so the walk continues to its ``sampler``.
    """
    seen: set[int] = set()
    stack = [child]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if callable(getattr(node, "set_epoch", None)):
            node.set_epoch(epoch)
            continue
        stack.extend(getattr(node, name, None) for name in _CHILD_ATTRIBUTES)
