import time

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


def _one_waits_forever(rank: int, world_size: int) -> int:
    if rank == 1:
        time.sleep(600)
    return rank


@pytest.mark.dist
def test_a_silent_run_fails_with_the_stack_of_the_rank_that_hangs() -> None:
    # NOTE: 10 s without progress is the bound under test: rank 1 sleeps 600 s, so it fires however busy
    # the machine is.
    with pytest.raises(RuntimeError, match="no progress for 10") as failure:
        run_distributed(_one_waits_forever, 2, timeout=10)
    message = str(failure.value)
    # NOTE: py-spy's frame line; where the machine forbids reading another process, its reason instead.
    assert "_one_waits_forever (" in message or "ermission" in message or "not permitted" in message, message
