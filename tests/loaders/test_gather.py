"""``gather_in_process_order`` (docs/DESIGN.md, "Exact evaluation"): whatever each process holds comes
back joined in process order, on 2 real gloo processes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lightning_shard.comm.gather import gather_in_process_order, keep_rows, merge_parts
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
    out.update(_vectorised_cases(rank, ids))
    return out


def _vectorised_cases(rank: int, ids: torch.Tensor) -> dict[str, Any]:
    """The tensor path's corners: leaves of different rows, an empty part, reordered sources, dtypes."""
    out: dict[str, Any] = {}
    mixed = gather_in_process_order((ids, torch.full((4 - rank, 2), rank), torch.tensor(rank > 0)))
    out["mixed_rows"] = [type(mixed).__name__, *(part.tolist() for part in mixed)]
    empty = torch.arange(rank * 3, dtype=torch.int16).reshape(-1, 1)  # no rows on rank 0
    out["empty"] = [gathered := gather_in_process_order(empty), gathered.dtype][0].tolist()
    out["reordered"] = gather_in_process_order(ids, sources=[1, 0]).tolist()
    out["reordered_tree"] = gather_in_process_order({"m": ids[:, None] > 3}, sources=[1, 0])["m"].tolist()
    dtypes = gather_in_process_order(ids.to(torch.int32 if rank else torch.int64))  # differ: objects
    out["dtypes"] = [str(dtypes.dtype), dtypes.tolist()]
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
    assert first["mixed_rows"] == ["tuple", [0, 1, 3, 4, 5], [[0, 0]] * 4 + [[1, 1]] * 3, [False, True]]
    assert first["empty"] == [[0], [1], [2]]
    assert first["reordered"] == [3, 4, 5, 0, 1]
    assert first["reordered_tree"] == [[False], [True], [True], [False], [False]]
    assert first["dtypes"] == ["torch.int64", [0, 1, 3, 4, 5]], "objects, concatenated as `torch.cat` does"


def test_merging_and_cutting_without_a_group() -> None:
    assert gather_in_process_order([1, 2]) == [1, 2]
    assert merge_parts([[1], [2, 3]]) == [1, 2, 3]
    assert merge_parts([{"a": [1], "b": torch.tensor([1])}, {"a": [2], "b": torch.tensor([2])}])["a"] == [
        1,
        2,
    ]
    assert merge_parts(["x", "y"]) == ["x", "y"]
    assert keep_rows({"a": [1, 2, 3], "b": torch.arange(3)}, slice(0, 2))["a"] == [1, 2]


def test_the_header_tells_what_must_agree() -> None:
    """Same structure, dtypes and trailing shapes: the same hash, whatever the rows; otherwise another."""
    from lightning_shard.comm import gather
    from lightning_shard.comm.tree import flatten

    def header(data: Any) -> list[int]:
        from lightning_shard.comm.tree import is_tensor_tree

        node, leaves = flatten(data)
        return gather._header(node, leaves, is_tensor_tree(data)).tolist()

    base = header({"x": torch.zeros(3, 2), "y": torch.zeros(3)})
    assert base[1:] == [1, 3, 1] and header({"x": torch.ones(5, 2), "y": torch.ones(5)})[0] == base[0]
    assert header({"x": torch.zeros(3, 2), "y": torch.zeros(4)})[2:] == [3, 0], "rows differ between leaves"
    for other in (
        {"x": torch.zeros(3, 3), "y": torch.zeros(3)},
        {"x": torch.zeros(3, 2, dtype=torch.int64), "y": torch.zeros(3)},
        {"z": torch.zeros(3, 2), "y": torch.zeros(3)},
        {"x": torch.zeros(3, 2), "y": torch.zeros(())},
        (torch.zeros(3, 2), torch.zeros(3)),
    ):
        assert header(other)[0] != base[0], other
    assert header(["a", "b"])[1] == 0 and header({"x": torch.zeros(1), "n": 3})[1] == 0
