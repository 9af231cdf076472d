"""Loader states written by a released version, kept as test files (``tests/data/legacy/<version>/``), and the
cases they were written from, which ``tests/loaders/test_legacy_states.py`` builds again with this code.

    PYTHONPATH=<checkout of the release> python tests/scripts/legacy_states.py OUT_DIR

writes one JSON file per case: the state a 2-process loader saved after ``STOP`` steps of epoch 1, the ids
each process had consumed of that epoch before, and the ids each process read after (the same version's
uninterrupted epoch). The script is self-contained (no ``tests`` import): it runs against a release's code.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset, IterableDataset

STOP = 3
"""Steps of epoch 1 taken before the state is saved."""
LENGTHS = (3, 2, 9, 5)
"""The shards of the sharded streams: 19 ids; on 2 processes one share ends before the state is saved."""


class IdMap(Dataset):
    """Sample ``i`` is ``i``."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        return index


class IdStream(IterableDataset):
    """The ids ``0 .. length - 1``, the same on every process."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.length))


class IdShards(IterableDataset):
    """Consecutive ids in shards of ``lengths``; ``n_shards`` / ``shard(num_shards, index)`` (contiguous groups)."""

    def __init__(self, shards: list[list[int]]) -> None:
        self.shards = shards

    @classmethod
    def of(cls, lengths: tuple[int, ...]) -> IdShards:
        shards, low = [], 0
        for length in lengths:
            shards.append(list(range(low, low + length)))
            low += length
        return cls(shards)

    @property
    def n_shards(self) -> int:
        return len(self.shards)

    def shard(self, num_shards: int, index: int) -> IdShards:
        size, extra = divmod(len(self.shards), num_shards)
        start = index * size + min(index, extra)
        return IdShards(self.shards[start : start + size + (index < extra)])

    def __iter__(self) -> Iterator[int]:
        for shard in self.shards:
            yield from shard


class RankSplit(IterableDataset):
    """A stream that splits itself by rank, declared: process ``r`` of ``N`` reads shards ``r, r + N, ...``."""

    splits_by_rank = True

    def __init__(self, shards: list[list[int]]) -> None:
        self.shards = shards

    def __iter__(self) -> Iterator[int]:
        rank, size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        for shard in self.shards[rank::size]:
            yield from shard


def _map(**kwargs: Any) -> Callable[[], DataLoader]:
    return lambda: DataLoader(IdMap(23), batch_size=3, **kwargs)


CASES: dict[str, tuple[Callable[[], DataLoader], dict[str, Any]]] = {
    "map_shuffled": (_map(shuffle=True), {}),
    "map_seedable": (_map(shuffle=True), {"use_seedable_sampler": True, "data_seed": 11}),
    "map_sequential": (_map(), {}),
    "map_split": (lambda: DataLoader(IdMap(23), batch_size=4, shuffle=True), {"split_batches": True}),
    "map_uneven": (lambda: DataLoader(IdMap(24), batch_size=3, shuffle=True), {"even_batches": False}),
    "map_dispatch": (_map(shuffle=True), {"dispatch_batches": True, "put_on_device": True}),
    "stream_strided": (lambda: DataLoader(IdStream(23), batch_size=3), {"iterable_sharding": "stride"}),
    "stream_dispatch": (
        lambda: DataLoader(IdStream(23), batch_size=3),
        {"dispatch_batches": True, "put_on_device": True},
    ),
    "stream_native": (lambda: DataLoader(IdShards.of(LENGTHS), batch_size=3), {}),
    "stream_self_split": (lambda: DataLoader(RankSplit(IdShards.of(LENGTHS).shards), batch_size=3), {}),
}
"""Each case: the user's loader, and the options it is prepared with (every kind of data, every mode)."""
SCALABLE = ("map_scalable", (_map(shuffle=True), {"scalable_shuffle": True, "data_seed": 5}))
"""A case of releases that have ``scalable_shuffle``."""


def ids(batch: Any) -> list[int]:
    return [int(i) for i in torch.as_tensor(batch).reshape(-1).tolist()]


def epoch_ids(loader: Any, steps: int | None = None) -> list[list[int]]:
    """The ids of each batch of one epoch (``steps`` of them), with a collective after each, as a step's."""
    out = []
    for batch in loader:
        out.append(ids(batch))
        dist.all_reduce(torch.ones(1))
        if steps is not None and len(out) == steps:
            break
    return out


def run_case(make: Callable[[], DataLoader], options: dict[str, Any]) -> dict[str, Any]:
    """Epoch 1 of a loader prepared as ``options``: uninterrupted, and stopped after ``STOP`` steps."""
    from lightning_shard import prepare_data_loader

    torch.manual_seed(0)
    whole = prepare_data_loader(make(), **options)
    epoch_ids(whole)
    torch.manual_seed(0)
    stopped = prepare_data_loader(make(), **options)
    epoch_ids(stopped)
    return {"whole": epoch_ids(whole), "head": epoch_ids(stopped, STOP), "state": stopped.state_dict()}


def worker(rank: int, world_size: int, init_file: str, out: str, names: list[str]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        import lightning_shard

        cases = dict(CASES)
        if "scalable_shuffle" in lightning_shard.prepare_data_loader.__code__.co_varnames:
            cases[SCALABLE[0]] = SCALABLE[1]
        for name in names or list(cases):
            result = run_case(*cases[name])
            everyone: list[Any] = [None] * world_size
            dist.all_gather_object(everyone, result)
            if rank == 0:
                record = {
                    "version": lightning_shard.__version__,
                    "case": name,
                    "stop": STOP,
                    "state": result["state"],
                    "head": [each["head"] for each in everyone],
                    "rest": [each["whole"][STOP:] for each in everyone],
                }
                with open(os.path.join(out, f"{name}.json"), "w") as file:
                    json.dump(record, file, indent=1)
    finally:
        dist.destroy_process_group()


def main(out: str, names: list[str]) -> None:
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        mp.start_processes(worker, args=(2, init_file, out, names), nprocs=2, start_method="spawn")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
