"""The source of a torchdata.nodes graph: the items of its root that this process reads at each step come from
the source of the root's kind (a map-style cursor over its sampler, or a stream's stride), and the user's graph,
rebuilt over them, turns each step's items into its batch (docs/DESIGN.md, "torchdata.nodes")."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

import torch

from lightning_shard.loaders.position import Position, ShardingInfo
from lightning_shard.loaders.source import Batches, BatchSource, moving
from lightning_shard.sampling.nodes_feed import Feed
from lightning_shard.sampling.torchdata_nodes import NodesGraph

AHEAD = 1
"""Steps handed to the graph before the one whose batch is awaited, so its workers go on across steps."""


class NodesSource(BatchSource):
    """``inner``'s steps of root items, each made a batch by ``graph`` rebuilt over them. Where an epoch
    stands, what is saved and how a resume skips are ``inner``'s: the graph only maps, so what it prefetched
    is never what a state records (the steps the loop consumed are)."""

    def __init__(self, inner: BatchSource, graph: NodesGraph) -> None:
        super().__init__(inner.loader)
        self.inner = inner
        self.graph = graph
        self.stream = inner.stream
        self.library = inner.library

    def batches(self, start: Position) -> Batches:
        return piped(self.inner.batches(start), self.graph, moving(self.loader))

    def length_after(self, base: int) -> int:
        return self.inner.length_after(base)

    def sharding(self) -> ShardingInfo:
        return self.inner.sharding()

    def set_epoch(self, epoch: int) -> None:
        self.inner.set_epoch(epoch)

    def generator(self) -> torch.Generator | None:
        return self.inner.generator()

    def seeded(self) -> Any:
        return self.inner.seeded()

    def workers(self) -> int:
        return self.inner.workers()

    def synchronize(self) -> None:
        self.inner.synchronize()


def piped(steps: Batches, graph: NodesGraph, move: Callable[[Any], Any] | None = None) -> Batches:
    """Each of ``steps`` (a step's root items, with whether it is the last) made a batch by ``graph`` rebuilt
    over a ``Feed``, ``move``d if given.

    NOTE: every step is read here, in the loader's thread, and handed over: what reads the steps (a sampler's
    draws, a stream's collectives) must never run in the graph's threads, whose timing differs by process.
    """
    feed = Feed()
    root = graph.build(feed)
    lasts: collections.deque[bool] = collections.deque()
    pending: Iterator[tuple[Any, bool]] = iter(steps)

    def hand_over() -> bool:
        step = next(pending, None)
        if step is None:
            feed.close()
            return False
        feed.put(list(step[0]))
        lasts.append(step[1])
        return True

    try:
        more = True
        for _ in range(AHEAD + 1):
            more = more and hand_over()
        while lasts:
            batch = _next_batch(root, graph, len(lasts))
            last = lasts.popleft()
            more = more and hand_over()
            yield (batch if move is None else move(batch)), last
    finally:
        feed.close()


def _next_batch(root: Any, graph: NodesGraph, waiting: int) -> Any:
    try:
        return next(root)
    except StopIteration:
        raise RuntimeError(
            f"The torchdata.nodes graph `{graph.describe()}` ended with {waiting} steps of its root's items still "
            "handed to it: one of its nodes yields fewer batches than it is given steps. Report this with the "
            "graph: lightning_shard rebuilds only nodes that yield one batch per step."
        ) from None
