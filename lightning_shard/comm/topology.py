"""Data-parallel topology: how many processes share the data and which one this is.

Read from the running ``torch.distributed`` group (1 and 0 without one) or from a ``DeviceMesh``, where
only the data-parallel dimensions split the data: ranks that differ only in tensor / context /
pipeline parallel coordinates get the same batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from lightning_shard._checks import check_num_processes, check_process_index
from lightning_shard.comm.collectives import is_distributed

DATA_PARALLEL_MESH_DIMS = ("dp", "dp_replicate", "dp_shard", "fsdp")


@dataclass(frozen=True)
class Topology:
    """The data-parallel size ``num_processes`` and this process's ``process_index`` in it."""

    num_processes: int
    process_index: int


def _mesh_topology(mesh: Any) -> Topology:
    names = tuple(mesh.mesh_dim_names or ())
    data_dims = [name for name in names if name in DATA_PARALLEL_MESH_DIMS]
    if not data_dims:
        return Topology(1, 0)
    size, index = 1, 0
    for name in data_dims:
        sub = mesh[name]
        size, index = size * sub.size(), index * sub.size() + sub.get_local_rank()
    return Topology(size, index)


def resolve_topology(
    num_processes: int | None = None, process_index: int | None = None, device_mesh: Any = None
) -> Topology:
    """Fill in what the caller left as ``None`` from the mesh or the process group, then check it.

    Raises:
        TypeError / ValueError: if ``num_processes < 1`` or ``process_index`` is outside ``[0, N)``.
    """
    if device_mesh is not None:
        found = _mesh_topology(device_mesh)
    elif is_distributed():
        found = Topology(dist.get_world_size(), dist.get_rank())
    else:
        found = Topology(1, 0)
    size = check_num_processes(found.num_processes if num_processes is None else num_processes)
    index = check_process_index(found.process_index if process_index is None else process_index, size)
    return Topology(size, index)
