"""Iterables left as they are (docs/DESIGN.md, "Iterables left as they are"): the digest of a batch, and the
first-batch check on real gloo groups of 2 and 3 processes: the same batches on every process stop every
process before its first batch, batches split by rank go on untouched."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from lightning_shard.comm.collectives import batch_digest, same_on_every_process
from lightning_shard.comm.topology import Topology
from lightning_shard.lightning.left_as_is import StatefulFirstBatchChecked, checked
from lightning_shard.loaders.kinds import classify_iterable
from lightning_shard.loaders.position import LeftAsItIs
from tests.helpers.dist import run_distributed

pytestmark = pytest.mark.dist


def test_the_digest_tells_contents_apart_and_only_contents() -> None:
    batch = {"id": torch.arange(4), "x": torch.ones(4, 2), "name": ["a", "b", "c", "d"]}
    same = {"id": torch.arange(4), "x": torch.ones(4, 2), "name": ["a", "b", "c", "d"]}
    assert batch_digest(batch) == batch_digest(same)
    assert 0 <= batch_digest(batch) < 1 << 62
    for other in (
        {**batch, "id": torch.arange(1, 5)},
        {**batch, "x": torch.ones(2, 4)},
        {**batch, "x": torch.ones(4, 2, dtype=torch.float64)},
        {**batch, "name": ["a", "b", "c", "e"]},
        [batch["id"], batch["x"]],
    ):
        assert batch_digest(other) != batch_digest(batch)
    assert batch_digest(torch.tensor(3.0, dtype=torch.bfloat16)) != batch_digest(torch.tensor(3.0))
    assert batch_digest([lambda: 1]) != batch_digest([lambda: 2])  # NOTE: not picklable: told apart by repr


class _Batches:
    def __init__(self, by_rank: bool, empty_on: int | None = None) -> None:
        self.by_rank, self.empty_on = by_rank, empty_on
        self.state = {"read": 0}

    def __iter__(self) -> Any:
        rank, size = (dist.get_rank(), dist.get_world_size()) if self.by_rank else (0, 1)
        if self.empty_on == dist.get_rank():
            return iter([])
        return (torch.arange(start, start + 2) for start in range(2 * rank, 12, 2 * size))

    def __len__(self) -> int:
        return 6

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = dict(state)


def _scenarios(rank: int, world_size: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    found = classify_iterable(_Batches(by_rank=False), Topology(world_size, rank))
    assert isinstance(found, LeftAsItIs) and found.checked and found.stateful
    try:
        list(checked(_Batches(by_rank=False), found, world_size))
    except ValueError as error:
        results["same"] = str(error)
    split = checked(_Batches(by_rank=True), found, world_size)
    results["split"] = [batch.tolist() for batch in split]
    results["len"] = len(split)
    results["stateful"] = isinstance(split, StatefulFirstBatchChecked) and split.state_dict() == {"read": 0}
    # NOTE: a process with no batch at all: not every process holds the same, so nothing is refused.
    results["one_empty"] = len(list(checked(_Batches(by_rank=False, empty_on=1), found, world_size)))
    results["digests"] = [same_on_every_process(7), same_on_every_process(rank), same_on_every_process(None)]
    return results


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_same_first_batch_everywhere_stops_every_process_and_split_batches_go_on(world_size: int) -> None:
    results = run_distributed(_scenarios, world_size)
    for rank, result in enumerate(results):
        message = result["same"]
        assert message.startswith("The training iterable `_Batches` is not a `DataLoader`"), message
        assert f"every one of the {world_size} processes read the same first batch" in message
        assert "a tensor of shape (2,) [0, 1]" in message and f"trained {world_size} times" in message
        assert "declare `splits_by_rank = False`" in message
        assert result["split"] == [[start, start + 1] for start in range(2 * rank, 12, 2 * world_size)]
        assert result["len"] == 6 and result["stateful"]
        assert result["one_empty"] == (0 if rank == 1 else 6)
        assert result["digests"] == [True, False, False]
