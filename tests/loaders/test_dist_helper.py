import pytest
import torch
import torch.distributed as dist

from tests.helpers.dist import run_distributed


def _sum_ranks(rank: int, world_size: int) -> int:
    t = torch.tensor([rank])
    dist.all_reduce(t)
    return int(t.item())


def _fail_on_one(rank: int, world_size: int) -> None:
    if rank == 1:
        raise KeyError("boom")


@pytest.mark.dist
def test_run_distributed_returns_by_rank_and_reports_failures() -> None:
    assert run_distributed(_sum_ranks, 2) == [1, 1]
    with pytest.raises(RuntimeError, match="boom"):
        run_distributed(_fail_on_one, 2, timeout=60)
