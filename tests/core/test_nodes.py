"""torchdata.nodes graphs in one process, every process index in turn (docs/DESIGN.md, "torchdata.nodes"):
a graph rooted in a ``SamplerWrapper`` yields, on each process, what the same ``DataLoader`` prepared with the
same options yields; an ``IterableWrapper`` is strided like any stream; what cannot be sharded is refused by
name."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler, SequentialSampler

pytest.importorskip(
    "torchdata.nodes", reason="torchdata.nodes needs torchdata 0.10 or later (`make test-oldest` has 0.8)"
)

from torchdata.nodes import (  # noqa: E402
    BaseNode,
    Batcher,
    IterableWrapper,
    Loader,
    Mapper,
    MultiNodeWeightedSampler,
    ParallelMapper,
    Prefetcher,
    SamplerWrapper,
    Unbatcher,
)

from lightning_shard import prepare_data_loader
from lightning_shard.comm.topology import Topology
from lightning_shard.loaders.kinds import classify_iterable
from lightning_shard.loaders.position import LeftAsItIs
from lightning_shard.sampling.torchdata_nodes import NodesGraph

N_IDS = 40


def _tensor(batch: list[int]) -> torch.Tensor:
    return torch.tensor(batch)


def _times_ten(key: int) -> int:
    return key * 10


def _graph(sampler: Any, batch_size: int, drop_last: bool, workers: int) -> Loader:
    """The issue's pipeline, with a per-item mapper (``workers`` threads) and a prefetcher in it."""
    items = (
        ParallelMapper(SamplerWrapper(sampler), _times_ten, num_workers=workers)
        if workers
        else Mapper(SamplerWrapper(sampler), _times_ten)
    )
    batches = Batcher(items, batch_size=batch_size, drop_last=drop_last)
    return Loader(Prefetcher(ParallelMapper(batches, _tensor, num_workers=workers), prefetch_factor=2))


def _reference(sampler: Any, batch_size: int, drop_last: bool) -> DataLoader:
    return DataLoader(
        [i * 10 for i in range(N_IDS)], batch_size=batch_size, sampler=sampler, drop_last=drop_last
    )


def _ids(loader: Any) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


SAMPLERS: dict[str, Callable[[], Any]] = {
    "sequential": lambda: SequentialSampler(range(N_IDS)),
    "random": lambda: RandomSampler(range(N_IDS), generator=torch.Generator().manual_seed(7)),
}


@pytest.mark.parametrize(
    ("sampler", "processes", "options", "drop_last", "workers"),
    [
        ("sequential", 2, {}, False, 0),
        ("sequential", 3, {}, True, 2),
        ("sequential", 3, {"split_batches": True}, False, 2),
        ("sequential", 2, {"even_batches": False}, False, 0),
        ("random", 2, {"use_seedable_sampler": True, "data_seed": 3}, False, 2),
        ("random", 3, {}, False, 0),
        ("random", 3, {"even_batches": False, "split_batches": True}, True, 2),
    ],
)
def test_a_sampler_rooted_graph_yields_what_the_same_data_loader_yields(
    sampler: str, processes: int, options: dict[str, Any], drop_last: bool, workers: int
) -> None:
    batch_size = 6 if options.get("split_batches") else 4
    for rank in range(processes):
        graph = _graph(SAMPLERS[sampler](), batch_size, drop_last, workers)
        ours = prepare_data_loader(graph, num_processes=processes, process_index=rank, **options)
        reference = prepare_data_loader(
            _reference(SAMPLERS[sampler](), batch_size, drop_last),
            num_processes=processes,
            process_index=rank,
            **options,
        )
        for epoch in range(2):
            ours.set_epoch(epoch)
            reference.set_epoch(epoch)
            expected = _ids(reference)
            assert _ids(ours) == expected, (rank, epoch)
            assert len(ours) == len(expected)


def test_every_id_once_per_epoch_over_the_processes() -> None:
    for processes in (2, 3):
        seen = []
        for rank in range(processes):
            graph = _graph(SAMPLERS["random"](), 4, False, 2)
            loader = prepare_data_loader(
                graph, num_processes=processes, process_index=rank, even_batches=False
            )
            seen += [i for batch in _ids(loader) for i in batch]
        assert sorted(seen) == [i * 10 for i in range(N_IDS)]


def test_the_users_graph_is_left_as_it_was() -> None:
    graph = _graph(SAMPLERS["sequential"](), 4, False, 2)
    _ids(prepare_data_loader(graph, Topology(2, 1)))
    assert sorted(i for batch in _ids(graph) for i in batch) == [i * 10 for i in range(N_IDS)]


@pytest.mark.parametrize(("saved_on", "resumed_on"), [(2, 2), (2, 1), (2, 3), (3, 2)])
def test_a_state_resumes_what_was_consumed_not_what_the_graph_prefetched(
    saved_on: int, resumed_on: int
) -> None:
    """Stop after 3 batches with the graph's prefetcher and workers ahead; load into fresh loaders: the rest
    is the uninterrupted rest (as many processes), or every id not consumed, once (another number)."""
    consumed: list[int] = []
    state: dict[str, Any] = {}
    for rank in range(saved_on):
        loader = prepare_data_loader(
            _graph(SAMPLERS["random"](), 4, False, 2),
            num_processes=saved_on,
            process_index=rank,
            use_seedable_sampler=True,
            data_seed=11,
        )
        loader.set_epoch(1)
        batches = _ids(itertools.islice(iter(loader), 3))
        consumed += [i for batch in batches for i in batch]
        state = loader.state_dict()
    rest: list[int] = []
    for rank in range(resumed_on):
        options = {"use_seedable_sampler": True, "data_seed": 11}
        fresh = prepare_data_loader(
            _graph(SAMPLERS["random"](), 4, False, 2), num_processes=resumed_on, process_index=rank, **options
        )
        fresh.load_state_dict(state)
        resumed = _ids(fresh)
        rest += [i for batch in resumed for i in batch]
        if resumed_on == saved_on:
            whole = prepare_data_loader(
                _graph(SAMPLERS["random"](), 4, False, 2),
                num_processes=saved_on,
                process_index=rank,
                **options,
            )
            whole.set_epoch(1)
            assert resumed == _ids(whole)[3:], rank
    assert sorted(set(consumed + rest)) == [i * 10 for i in range(N_IDS)]
    assert (
        not set(consumed) & set(rest) or resumed_on == saved_on
    )  # NOTE: only the last step's padding repeats


class _Elements(IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(N_IDS))


@pytest.mark.parametrize("iterable", [range(N_IDS), _Elements()], ids=["range", "iterable-dataset"])
def test_an_iterable_wrapper_is_strided_like_a_stream(iterable: Any) -> None:
    seen = []
    for rank in range(2):
        graph = Loader(Mapper(Batcher(IterableWrapper(iterable), batch_size=4, drop_last=False), _tensor))
        with (
            pytest.warns(UserWarning, match="every process reads the whole iterable")
            if rank == 0
            else _nothing()
        ):
            loader = prepare_data_loader(graph, num_processes=2, process_index=rank)
        reference = prepare_data_loader(
            DataLoader(_Elements(), batch_size=4),
            num_processes=2,
            process_index=rank,
            iterable_sharding="stride",
        )
        batches = _ids(loader)
        assert batches == _ids(reference)
        assert "strided" in (loader.kind.describe() or "")
        seen += [i for batch in batches for i in batch]
    assert sorted(seen) == list(range(N_IDS))


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: Any) -> None:
        return None


class _OwnNode(BaseNode[int]):
    def __init__(self, source: BaseNode[int]) -> None:
        super().__init__()
        self.source = source

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset()

    def next(self) -> int:
        return next(self.source)

    def get_state(self) -> dict[str, Any]:
        return {}


def _root() -> SamplerWrapper:
    return SamplerWrapper(SequentialSampler(range(N_IDS)))


@pytest.mark.parametrize(
    ("graph", "error", "match"),
    [
        (lambda: Loader(_OwnNode(Batcher(_root(), 4))), TypeError, r"reaches a `_OwnNode` \(_OwnNode\)"),
        (lambda: Loader(Unbatcher(Batcher(_root(), 4))), TypeError, "reaches a `Unbatcher`"),
        (lambda: Loader(Batcher(Batcher(_root(), 2), 2)), ValueError, "two `Batcher`s"),
        (
            lambda: Loader(Batcher(SamplerWrapper(DistributedSampler(range(8), num_replicas=2, rank=0)), 2)),
            ValueError,
            "already shards by rank",
        ),
    ],
    ids=["own-node", "unbatcher", "two-batchers", "distributed-sampler"],
)
def test_what_cannot_be_sharded_is_refused_by_name(graph: Callable[[], Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        prepare_data_loader(graph(), num_processes=2, process_index=0)


def test_dispatch_batches_is_refused_by_name() -> None:
    with pytest.raises(
        ValueError, match=r"`dispatch_batches=True` with the torchdata.nodes graph `Loader\(Batcher"
    ):
        prepare_data_loader(
            Loader(Batcher(_root(), 4)),
            num_processes=2,
            process_index=0,
            dispatch_batches=True,
            put_on_device=True,
        )


def _weighted(rank: int, world_size: int) -> Loader:
    sources = {"a": IterableWrapper(range(10)), "b": IterableWrapper(range(10, 20))}
    mixed = MultiNodeWeightedSampler(sources, {"a": 0.5, "b": 0.5}, rank=rank, world_size=world_size)
    return Loader(Batcher(mixed, 2))


def test_what_each_iterable_is() -> None:
    graph = classify_iterable(Loader(Batcher(_root(), 4)), Topology(2, 0))
    assert (
        isinstance(graph, NodesGraph)
        and graph.describe() == "Loader(Batcher(SamplerWrapper(SequentialSampler)))"
    )
    weighted = classify_iterable(_weighted(1, 2), Topology(2, 1))
    assert isinstance(weighted, LeftAsItIs) and not weighted.checked and "rank 1 of 2" in weighted.reason
    with pytest.raises(ValueError, match=r"built for rank 0 of 1 \(`rank=0`, `world_size=1`\).*rank 1 of 2"):
        classify_iterable(_weighted(0, 1), Topology(2, 1))
    with pytest.raises(TypeError, match="splits itself"):
        prepare_data_loader(_weighted(0, 2), num_processes=2, process_index=0)
    plain = classify_iterable([[1, 2], [3, 4]], Topology(2, 0))
    assert isinstance(plain, LeftAsItIs) and plain.checked and plain.name == "list"

    class Declared(list):  # type: ignore[type-arg]
        splits_by_rank = False

    declared = classify_iterable(Declared(), Topology(2, 0))
    assert isinstance(declared, LeftAsItIs) and not declared.checked
    with pytest.raises(TypeError, match=r"got list \(not a `DataLoader`"):
        prepare_data_loader([[1, 2]], num_processes=2, process_index=0)
