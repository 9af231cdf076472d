"""A torchdata.nodes graph rebuilt over the items one process reads (docs/DESIGN.md, "torchdata.nodes"): its
root becomes the ``Feed`` the loader's thread hands the items to, step by step, and its ``Batcher`` a
``FeedBatcher`` that groups them by the step they were handed in; every other node is built again as the
user built it. The user's graph is never iterated or changed."""

from __future__ import annotations

import collections
import queue
from collections.abc import Sequence
from typing import Any

from torchdata.nodes import BaseNode, ParallelMapper, PinMemory, Prefetcher

_END = object()


class Feed(BaseNode[Any]):
    """The rebuilt graph's root: each step's items the loader's thread hands over, in order, and each step's size
    (read by ``FeedBatcher`` from the graph's threads: a ``queue.SimpleQueue`` and a ``deque`` are safe there)."""

    def __init__(self) -> None:
        super().__init__()
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._sizes: collections.deque[int] = collections.deque()

    def put(self, items: Sequence[Any]) -> None:
        """Hand over one step's items (its size first, so the step is known before any of its items)."""
        self._sizes.append(len(items))
        for item in items:
            self._items.put(item)

    def close(self) -> None:
        """No more steps: a graph reading on gets ``StopIteration`` (its threads end)."""
        self._items.put(_END)

    def next(self) -> Any:
        """The next item; ``StopIteration`` once closed (again at every later call)."""
        item = self._items.get()
        if item is _END:
            self._items.put(_END)
            raise StopIteration
        return item

    def get_state(self) -> dict[str, Any]:
        return {}

    def step_size(self) -> int:
        """The size of the oldest step whose items are not grouped yet."""
        return self._sizes.popleft()


class FeedBatcher(BaseNode[list[Any]]):
    """The rebuilt graph's ``Batcher``: one batch of each step's items, however many the step had (a sharded
    step may hold fewer than the user's ``batch_size``: ``split_batches``, the epoch's last)."""

    def __init__(self, source: BaseNode[Any], feed: Feed) -> None:
        super().__init__()
        self.source = source
        self.feed = feed

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(None if initial_state is None else initial_state["source"])

    def next(self) -> list[Any]:
        # NOTE: the first item first: once it arrived, its step's size was handed over before it.
        batch = [next(self.source)]
        return batch + [next(self.source) for _ in range(self.feed.step_size() - 1)]

    def get_state(self) -> dict[str, Any]:
        return {"source": self.source.state_dict()}


_MAPPER_SETTINGS = ("num_workers", "in_order", "method", "multiprocessing_context", "max_concurrent")
"""``ParallelMapper``'s public arguments read from the user's node by the same names (but for its source, function,
``snapshot_frequency`` and ``prebatch``)."""


def _rebuilt_node(user: Any, source: BaseNode[Any], feed: Feed) -> BaseNode[Any]:
    """The user's node ``user`` (of ``torchdata_nodes.PASSING``) built again over ``source``."""
    name = type(user).__name__
    if name == "Batcher":
        return FeedBatcher(source, feed)
    frequency = user.snapshot_frequency
    if name == "Prefetcher":
        return Prefetcher(source, user.prefetch_factor, frequency)
    if name == "PinMemory":
        # NOTE: torchdata keeps the device only privately (`""` when none was given); read, never written.
        return PinMemory(source, getattr(user, "_pin_memory_device", None) or "", frequency)
    # NOTE: with `prebatch`, torchdata keeps the user's function inside a `MapOverBatch`.
    map_fn = user.map_fn if user.prebatch is None else user.map_fn.map_fn
    settings = {setting: getattr(user, setting) for setting in _MAPPER_SETTINGS}
    return ParallelMapper(source, map_fn, snapshot_frequency=frequency, prebatch=user.prebatch, **settings)


def rebuilt(nodes: Sequence[Any], feed: Feed) -> BaseNode[Any]:
    """``nodes`` (from the top down) built again over ``feed``."""
    node: BaseNode[Any] = feed
    for user in reversed(nodes):
        node = _rebuilt_node(user, node, feed)
    return node
