"""``gather_in_process_order`` (docs/DESIGN.md, "Exact evaluation"): whatever each process holds comes
back joined in process order, on 2 real gloo processes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lightning_shard.comm.gather import gather_in_process_order, keep_rows, merge_parts, rows_of
from tests.helpers.dist import run_distributed


def _gathered(rank: int, world_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ids = torch.arange(3 * rank, 3 * rank + 2 + rank)  # 2 rows on rank 0, 3 on rank 1
    out["ragged"] = gather_in_process_order(ids).tolist()
    out["scalar"] = gather_in_process_order(torch.tensor(float(rank))).tolist()
    tree = {"ids": ids, "pair": (ids * 10, ids.float()[:, None])}
    gathered = gather_in_process_order(tree)
    out["tree"] = [gathered["ids"].tolist(), gathered["pair"][0].tolist(), list(gathered["pair"][1].shape)]
    out["dicts"] = gather_in_process_order([{"id": int(i), "name": f"s{int(i)}"} for i in ids])
    out["strings"] = gather_in_process_order(f"rank{rank}")
    different = {"ids": ids} if rank == 0 else {"ids": ids, "extra": torch.zeros(1)}
    merged = gather_in_process_order(different)  # structures differ: gathered as objects, per process
    out["different"] = [sorted(part) for part in merged]
    widths = gather_in_process_order(torch.zeros(2, 1 + rank))  # trailing shapes differ: objects
    out["widths"] = [list(part.shape) for part in widths] if isinstance(widths, list) else list(widths.shape)
    out["sources"] = gather_in_process_order(ids, sources=[1]).tolist()
    out["sources_objects"] = gather_in_process_order(f"rank{rank}", sources=[1])
    return out


@pytest.mark.dist
def test_anything_comes_back_in_process_order() -> None:
    first, second = run_distributed(_gathered, 2)
    assert first == second, "every process gets the same"
    assert first["ragged"] == [0, 1, 3, 4, 5]
    assert first["scalar"] == [0.0, 1.0]
    assert first["tree"] == [[0, 1, 3, 4, 5], [0, 10, 30, 40, 50], [5, 1]]
    assert first["dicts"] == [{"id": i, "name": f"s{i}"} for i in (0, 1, 3, 4, 5)]
    assert first["strings"] == ["rank0", "rank1"]
    assert first["different"] == [["ids"], ["extra", "ids"]]
    assert first["widths"] == [[2, 1], [2, 2]]
    assert first["sources"] == [3, 4, 5] and first["sources_objects"] == ["rank1"], (
        "only the kept ranks' parts"
    )


def test_merging_and_cutting_without_a_group() -> None:
    assert gather_in_process_order([1, 2]) == [1, 2]
    assert merge_parts([[1], [2, 3]]) == [1, 2, 3]
    assert merge_parts([{"a": [1], "b": torch.tensor([1])}, {"a": [2], "b": torch.tensor([2])}])["a"] == [
        1,
        2,
    ]
    assert merge_parts(["x", "y"]) == ["x", "y"]
    assert keep_rows({"a": [1, 2, 3], "b": torch.arange(3)}, slice(0, 2))["a"] == [1, 2]
    assert rows_of({"a": [1, 2, 3], "b": torch.arange(3)}) == 3 and rows_of("x") is None
