"""Data-parallel topology: how many processes share the data and which one this is, from the running
``torch.distributed`` group or from a ``DeviceMesh``, where only the data-parallel dimensions split the data
(docs/DESIGN.md, "What the mesh decides").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from lightning_shard._checks import check_num_processes, check_process_index
from lightning_shard.comm.collectives import is_distributed, world_size

DATA_PARALLEL_MESH_DIMS = ("data_parallel", "dp", "dp_replicate", "dp_shard", "fsdp", "dp_shard_cp")
"""Mesh dimension names that split the data (Lightning's ``ModelParallelStrategy`` names its
``"data_parallel"``); every other dimension is replicated: its ranks get the same batches."""


@dataclass(frozen=True)
class Topology:
    """The data-parallel size ``num_processes``, this process's ``process_index`` in it, and ``rank_indices``,
    every global rank's data-parallel index when ranks share one (``None``: rank ``r`` is index ``r``).
    """

    num_processes: int
    process_index: int
    rank_indices: tuple[int, ...] | None = None

    @property
    def leaders(self) -> tuple[int, ...]:
        """The global rank that speaks for each data-parallel index (its lowest), in index order: collectives
        that count data keep only these ranks' parts, the other ranks of an index holding the same batches."""
        if self.rank_indices is None:
            return tuple(range(self.num_processes))
        # NOTE: walked from the highest rank down, so each index keeps its lowest rank.
        first = {index: rank for rank, index in reversed(list(enumerate(self.rank_indices)))}
        return tuple(first[index] for index in range(self.num_processes))

    def covers_world(self) -> bool:
        """Whether every rank of the running process group iterates these loaders (so world-wide
        collectives inside the loader reach exactly its members)."""
        ranks = self.num_processes if self.rank_indices is None else len(self.rank_indices)
        return ranks == world_size()


def mesh_topology(mesh: Any) -> Topology:
    """The data-parallel topology a ``DeviceMesh`` describes: the product of its data-parallel
    dimensions (``DATA_PARALLEL_MESH_DIMS``), this rank's index in it (row-major over those dimensions,
    in mesh order), and, when the mesh spans the whole process group, every rank's index."""
    ranks: torch.Tensor = mesh.mesh
    indices = torch.zeros(ranks.shape, dtype=torch.int64)
    size = 1
    for dim, name in enumerate(mesh.mesh_dim_names or ()):
        if name in DATA_PARALLEL_MESH_DIMS:
            extent = ranks.shape[dim]
            coordinate = torch.arange(extent).reshape([extent if d == dim else 1 for d in range(ranks.dim())])
            indices, size = indices * extent + coordinate, size * extent
    here = int(indices[ranks == mesh.get_rank()].item())
    return Topology(size, here, _rank_indices(ranks.reshape(-1), indices.reshape(-1)))


def _rank_indices(ranks: torch.Tensor, indices: torch.Tensor) -> tuple[int, ...] | None:
    """Every global rank's index, if the mesh holds every rank of the group (``None`` otherwise, and for
    the plain layout where rank ``r`` is index ``r``)."""
    world = world_size()
    if sorted(ranks.tolist()) != list(range(world)):
        # NOTE: a sub-mesh (e.g. one rank's data-parallel slice) cannot say what the other ranks hold.
        return None
    by_rank = indices[ranks.argsort()].tolist()
    return None if by_rank == list(range(world)) else tuple(by_rank)


def resolve_topology(
    num_processes: int | None = None, process_index: int | None = None, device_mesh: Any = None
) -> Topology:
    """Fill in what the caller left as ``None`` from the mesh or the process group, then check it.

    Raises:
        TypeError / ValueError: if ``num_processes < 1`` or ``process_index`` is outside ``[0, N)``.
    """
    if device_mesh is not None:
        found = mesh_topology(device_mesh)
    else:
        found = Topology(dist.get_world_size(), dist.get_rank()) if is_distributed() else Topology(1, 0)
    size = check_num_processes(found.num_processes if num_processes is None else num_processes)
    index = check_process_index(found.process_index if process_index is None else process_index, size)
    # NOTE: explicit sizes override the mesh; then only the caller knows which ranks share an index.
    mapping = found.rank_indices if num_processes is None and process_index is None else None
    return Topology(size, index, mapping)
