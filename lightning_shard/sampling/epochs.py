"""Epoch propagation: ``set_epoch`` must reach the sampler through every wrapper in between (docs/DESIGN.md, "Epoch purity")."""

from __future__ import annotations

from typing import Any

_CHILD_ATTRIBUTES = ("batch_sampler", "sampler")


def forward_epoch(child: Any, epoch: int) -> None:
    """Set ``epoch`` on ``child`` and on everything it wraps (``batch_sampler``, ``sampler``), each once.

    NOTE: the walk goes on below an object that has its own ``set_epoch``: a user's batch sampler may
    define one that does not forward it, and its sampler would then replay the first epoch's order.
    Setting an epoch only assigns it, so reaching an object twice (our wrappers forward too) is harmless.
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
        stack.extend(getattr(node, name, None) for name in _CHILD_ATTRIBUTES)
