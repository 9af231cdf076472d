"""What the mesh decides, on a real (2, 2) gloo ``DeviceMesh`` of 4 processes (docs/DESIGN.md, "What the
mesh decides"): the data-parallel topology of each rank, dispatch by global rank 0 to every rank (a
tensor-parallel peer gets its index's slice), the end-of-stream agreement over the whole mesh, gathering
one part per data-parallel index, and a sub-mesh refused for dispatch.

Both mesh layouts run: Lightning's ``("data_parallel", "tensor_parallel")`` (index ``rank // 2``) and
``("tp", "dp")`` (index ``rank % 2``), so neither rank order nor dimension order is assumed.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.datasets import IdMap, IdStream
from tests.helpers.dist import run_distributed

pytestmark = pytest.mark.dist

LAYOUTS = {
    "lightning": (("data_parallel", "tensor_parallel"), (0, 0, 1, 1)),
    "tp_first": (("tp", "dp"), (0, 1, 0, 1)),
}
"""Mesh dimension names of a (2, 2) mesh, and the data-parallel index of ranks 0..3."""


def _batches(loader: Any, epochs: int = 2) -> list[list[int]]:
    return [batch.tolist() for _ in range(epochs) for batch in loader]


def _shuffled(length: int) -> DataLoader:
    return DataLoader(IdMap(length), batch_size=2, shuffle=True)


def run_layout(rank: int, world_size: int, names: tuple[str, str]) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh

    from lightning_shard import prepare_data_loader
    from lightning_shard.comm.gather import gather_in_process_order
    from lightning_shard.comm.topology import mesh_topology

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=names)
    topology = mesh_topology(mesh)
    # NOTE: a seedable sampler, so that shard and dispatch shuffle alike: before each epoch a shard loader's
    # DataLoader draws its workers' base seed from the loader's generator (often the sampler's too); a
    # dispatcher keeps no loader generator.
    options: dict[str, Any] = {"torch_device_mesh": mesh, "use_seedable_sampler": True, "data_seed": 5}
    dispatch = {**options, "dispatch_batches": True, "put_on_device": True}
    result: dict[str, Any] = {
        "topology": (topology.num_processes, topology.process_index, topology.rank_indices, topology.leaders),
        "shard": _batches(prepare_data_loader(_shuffled(16), **options)),
        "dispatch": _batches(prepare_data_loader(_shuffled(16), **dispatch)),
        "dispatch_stream": _batches(prepare_data_loader(DataLoader(IdStream(12), batch_size=2), **dispatch)),
        "shard_stream": _batches(prepare_data_loader(DataLoader(IdStream(12), batch_size=2), **options)),
        "gathered": gather_in_process_order(torch.tensor([rank]), topology.leaders).tolist(),
        "gathered_objects": gather_in_process_order([f"r{rank}"], topology.leaders),
    }
    # The stream of data-parallel index 1 is longer: every rank must raise at the same batch.
    uneven = DataLoader(IdStream(8 + 4 * topology.process_index), batch_size=2)
    try:
        result["uneven"] = _batches(prepare_data_loader(uneven, **options), epochs=1)
    except RuntimeError as error:
        result["uneven"] = str(error)
    try:
        prepare_data_loader(
            DataLoader(IdMap(8), batch_size=2), **{**dispatch, "torch_device_mesh": mesh[names[0]]}
        )
    except ValueError as error:
        result["sub_mesh"] = str(error)
    return result


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def layout(request: pytest.FixtureRequest) -> tuple[tuple[int, ...], list[dict[str, Any]]]:
    names, indices = LAYOUTS[request.param]
    return indices, run_distributed(run_layout, 4, names, timeout=120)


def test_topology_of_each_rank(layout: tuple[tuple[int, ...], list[dict[str, Any]]]) -> None:
    indices, results = layout
    leaders = (0, indices.index(1))
    for rank, result in enumerate(results):
        assert result["topology"] == (2, indices[rank], indices, leaders)


def test_peers_get_their_index_slice_and_dispatch_matches_shard(
    layout: tuple[tuple[int, ...], list[dict[str, Any]]],
) -> None:
    indices, results = layout
    for kind in ("shard", "dispatch", "dispatch_stream", "shard_stream"):
        by_index = {index: results[rank][kind] for rank, index in enumerate(indices)}
        for rank, index in enumerate(indices):
            assert results[rank][kind] == by_index[index], f"{kind}: peers of index {index} differ"
        first, second = (by_index[0], by_index[1])
        assert all(not set(a) & set(b) for a, b in zip(first, second, strict=True)), kind
    for rank in range(4):
        # 16 samples and 12 elements fill every global batch of 4, so dispatch and shard agree exactly.
        assert results[rank]["dispatch"] == results[rank]["shard"]
        assert results[rank]["dispatch_stream"] == results[rank]["shard_stream"]
    epoch = [i for index in (0, 1) for batch in results[indices.index(index)]["shard"][:4] for i in batch]
    assert sorted(epoch) == list(range(16))


def test_gather_keeps_one_part_per_data_parallel_index(
    layout: tuple[tuple[int, ...], list[dict[str, Any]]],
) -> None:
    indices, results = layout
    leaders = [0, indices.index(1)]
    for result in results:
        assert result["gathered"] == leaders
        assert result["gathered_objects"] == [f"r{rank}" for rank in leaders]


def test_uneven_streams_fail_on_every_rank_of_the_mesh(
    layout: tuple[tuple[int, ...], list[dict[str, Any]]],
) -> None:
    _, results = layout
    messages = {result["uneven"] for result in results}
    assert len(messages) == 1, "every rank raises the same error at the same batch"
    (message,) = messages
    assert isinstance(message, str) and "ran out on processes" in message


def test_dispatch_with_a_sub_mesh_is_refused(layout: tuple[tuple[int, ...], list[dict[str, Any]]]) -> None:
    _, results = layout
    for result in results:
        assert (
            "does not span the 4 ranks" in result["sub_mesh"] and "Pass the whole mesh" in result["sub_mesh"]
        )
