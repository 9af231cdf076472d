"""torchdata.nodes graphs: what the loader must know of one, found by walking it from its top (a ``Loader``'s
``root``, or a bare node) down to its root (docs/DESIGN.md, "torchdata.nodes").

A graph is sharded through its root: a ``SamplerWrapper``'s sampler is dealt like a ``DataLoader``'s (a
``Batcher`` above it gives the batch size and ``drop_last``), an ``IterableWrapper``'s iterable is strided like
any stream, and a ``MultiNodeWeightedSampler`` told the job's ``rank`` / ``world_size`` splits itself. Every node
between the top and the root must be one whose passing of items is known (``PASSING``): the graph is rebuilt
over the items each process reads (``sampling/nodes_feed.py``), so a node of unknown behaviour (a user's
``BaseNode``, a subclass of a known one, an ``Unbatcher``) is refused by name, never guessed at. Recognised by
module and class name: torchdata 0.8 and 0.9 have no ``torchdata.nodes``, and this module imports none.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset

RootKind: TypeAlias = Literal["sampler", "stream", "weighted"]
"""How a graph's root is read: a sampler's keys, a stream's elements, or a weighted mix that splits itself."""

ROOTS: dict[str, RootKind] = {
    "SamplerWrapper": "sampler",
    "IterableWrapper": "stream",
    "MultiNodeWeightedSampler": "weighted",
}
"""The roots a graph can be sharded (or passed through) by."""
PASSING = ("Batcher", "ParallelMapper", "Prefetcher", "PinMemory")
"""The nodes whose handling of their source's items is known: one out for one in (``Mapper`` is a
``ParallelMapper``), or a ``Batcher``'s groups."""
_PACKAGE = "torchdata.nodes"


def _own_name(obj: Any) -> str | None:
    """The class name of ``obj`` if its class itself (not a base) is one of ``torchdata.nodes``'s."""
    cls = type(obj)
    return cls.__name__ if cls.__module__.startswith(_PACKAGE) else None


def is_node_graph(obj: Any) -> bool:
    """Whether ``obj`` is a torchdata.nodes ``Loader`` or node (a user's ``BaseNode`` subclass included)."""
    return any(
        cls.__module__.startswith(_PACKAGE) and cls.__name__ in ("Loader", "BaseNode")
        for cls in type(obj).__mro__
    )


@dataclass(frozen=True)
class NodesGraph:
    """A torchdata.nodes graph as read by ``read_graph``.

    Attributes:
        top: what the user handed over: a ``Loader`` or the graph's top node.
        nodes: the nodes between the top and the root, from the top down (the top node first).
        root: the graph's root node.
        root_kind: how the root is read (``RootKind``).
    """

    top: Any
    nodes: tuple[Any, ...]
    root: Any
    root_kind: RootKind

    def describe(self) -> str:
        """The graph in one line, for the plan: ``Loader(ParallelMapper(Batcher(SamplerWrapper(RandomSampler))))``."""
        inner = type(self.root.sampler).__name__ if self.root_kind == "sampler" else ""
        text = f"{type(self.root).__name__}({inner})" if inner else type(self.root).__name__
        for node in reversed(self.nodes):
            text = f"{type(node).__name__}({text})"
        return f"Loader({text})" if _own_name(self.top) == "Loader" else text

    def build(self, feed: Any) -> Any:
        """The graph rebuilt over ``feed`` (``sampling/nodes_feed.py``): its root replaced by the items this
        process reads, its ``Batcher`` by one that groups them by step, every other node as the user built it."""
        from lightning_shard.sampling.nodes_feed import rebuilt

        return rebuilt(self.nodes, feed)


def read_graph(top: Any) -> NodesGraph:
    """The ``NodesGraph`` of a torchdata.nodes ``Loader`` or node ``top`` (``is_node_graph``).

    Raises:
        TypeError: on a node whose handling of items is not known (named, with the fix).
        ValueError: on a graph with more than one ``Batcher``.
    """
    node = top.root if _own_name(top) == "Loader" else top
    nodes: list[Any] = []
    while True:
        name = _own_name(node)
        if name in ROOTS:
            return NodesGraph(top, tuple(nodes), node, ROOTS[name])
        if name not in PASSING:
            where = " -> ".join(type(seen).__name__ for seen in [*nodes, node])
            raise TypeError(
                f"The torchdata.nodes graph of this `{type(top).__name__}` reaches a `{type(node).__name__}` ({where}), "
                "which lightning_shard does not know: it shards a graph through its root (a `SamplerWrapper` or "
                "`IterableWrapper`; a `MultiNodeWeightedSampler` given `rank` and `world_size` is passed through) and "
                f"rebuilds the nodes above it, which it can only do for nodes whose handling of items it knows "
                f"({', '.join(f'`{known}`' for known in PASSING)}; `Mapper` is a `ParallelMapper`). Build the graph from "
                "those, return a `DataLoader`, or, if the graph splits itself by rank (or is meant to be read whole "
                "by every process), declare `splits_by_rank = True` (or `False`) on it to have it left as it is."
            )
        if name == "Batcher" and any(_own_name(seen) == "Batcher" for seen in nodes):
            raise ValueError(
                f"The torchdata.nodes graph of this `{type(top).__name__}` has two `Batcher`s: lightning_shard "
                "deals the root's items in batches of the one `Batcher`'s size, and would not know which. Batch "
                "once (one `Batcher`), or declare `splits_by_rank = True` on it to have it left as it is."
            )
        nodes.append(node)
        # NOTE: a `ParallelMapper` with `prebatch` reads through a `Batcher` it made.
        node = node.source.source if name == "ParallelMapper" and node.prebatch is not None else node.source


class RootKeys(Dataset[Any]):
    """A sampler's keys as a map-style dataset: each key fetched as itself (the graph's nodes load it)."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __getitem__(self, key: Any) -> Any:
        return key

    def __len__(self) -> int:
        return len(self.sampler)


class RootStream(IterableDataset[Any]):
    """An ``IterableWrapper``'s iterable as an iterable dataset (one that already is one is used itself)."""

    def __init__(self, iterable: Any) -> None:
        self.iterable = iterable

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterable)


def root_loader(graph: NodesGraph) -> DataLoader:
    """The ``DataLoader`` of ``graph``'s root items, a step's items a batch (a list): what is sharded, as a user's
    ``DataLoader`` would be (batches of the ``Batcher``'s size and ``drop_last``; one item a step without one).
    A ``SamplerWrapper``'s or an ``IterableWrapper``'s: a ``MultiNodeWeightedSampler`` root splits itself, and
    ``classify_iterable`` leaves it as it is, so it never comes here.
    """
    batcher = next((node for node in graph.nodes if _own_name(node) == "Batcher"), None)
    batch_size = 1 if batcher is None else int(batcher.batch_size)
    drop_last = batcher is not None and bool(batcher.drop_last)  # NOTE: torchdata's default is `True`.
    if graph.root_kind == "sampler":
        sampler = graph.root.sampler
        return DataLoader(
            RootKeys(sampler), batch_sampler=BatchSampler(sampler, batch_size, drop_last), collate_fn=list
        )
    iterable = graph.root.iterable
    dataset = iterable if isinstance(iterable, IterableDataset) else RootStream(iterable)
    return DataLoader(dataset, batch_size=batch_size, drop_last=drop_last, collate_fn=list)
