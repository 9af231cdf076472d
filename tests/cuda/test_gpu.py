"""The GPU check (``make gpu-check``): what only CUDA devices can show. Every test here is marked ``cuda``
and skipped when the machine has too few CUDA devices, so CPU CI skips them all.

One GPU: batches placed on the device by the loader, ``non_blocking`` copies from pinned memory, CUDA
generators synchronised. Two GPUs: dispatch over NCCL (plain and under a ``(1, 2)`` mesh), and real
2-GPU fits of ``ShardStrategy`` (with ``put_on_device`` / ``non_blocking``, and with dispatch) and of
``ShardFSDPStrategy`` (both checkpoint formats), each resumed exactly mid-epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.dist import run_distributed
from tests.helpers.lightning_app import RecordMap, read_records
from tests.helpers.runner import run_command, script

pytestmark = pytest.mark.cuda


def _needs(devices: int) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        torch.cuda.device_count() < devices,
        reason=f"needs {devices} CUDA device(s), found {torch.cuda.device_count()}; run `make gpu-check` on a GPU machine",
    )


def _records_loader(**kwargs: Any) -> DataLoader:
    return DataLoader(RecordMap(10), batch_size=4, **kwargs)


@_needs(1)
def test_loader_places_batches_non_blocking_from_pinned_memory() -> None:
    from lightning_shard import prepare_data_loader, skip_first_batches

    expected = [batch["id"].tolist() for batch in _records_loader()]
    prepared = prepare_data_loader(
        _records_loader(pin_memory=True),
        device="cuda:0",
        put_on_device=True,
        non_blocking=True,
        rng_types=["torch", "cuda"],
    )
    assert prepared.pin_memory and prepared.non_blocking
    batches = list(prepared)
    torch.cuda.synchronize()
    assert all(batch["x"].device == torch.device("cuda", 0) for batch in batches)
    assert [batch["id"].tolist() for batch in batches] == expected
    reference = [batch["x"] for batch in _records_loader()]
    assert all(torch.equal(batch["x"].cpu(), x) for batch, x in zip(batches, reference, strict=True))
    skipped = list(skip_first_batches(prepared, 1))
    assert skipped[0]["x"].is_cuda and [b["id"].tolist() for b in skipped] == expected[1:]


def run_dispatch(rank: int, world_size: int) -> dict[str, Any]:
    """Shard and dispatch of the same shuffled data on ``cuda:rank``, plain and under a (1, 2) mesh."""
    from torch.distributed.device_mesh import init_device_mesh

    from lightning_shard import prepare_data_loader

    def batches(**options: Any) -> list[Any]:
        loader = DataLoader(RecordMap(16), batch_size=2, shuffle=True, pin_memory=True)
        prepared = prepare_data_loader(
            loader, device=f"cuda:{rank}", use_seedable_sampler=True, data_seed=3, **options
        )
        out = [(batch["id"].tolist(), batch["x"].device.type, batch["x"].sum().item()) for batch in prepared]
        return [out, getattr(prepared, "bytes_received", None)]

    dispatch = {"dispatch_batches": True, "put_on_device": True, "non_blocking": True}
    mesh = init_device_mesh("cuda", (1, 2), mesh_dim_names=("dp", "tp"))
    return {
        "shard": batches(put_on_device=True),
        "dispatch": batches(**dispatch),
        "mesh": batches(torch_device_mesh=mesh, **dispatch),
    }


@_needs(2)
def test_dispatch_over_nccl() -> None:
    results = run_distributed(run_dispatch, 2, backend="nccl", timeout=180)
    for rank, result in enumerate(results):
        shard, dispatch = result["shard"][0], result["dispatch"][0]
        assert dispatch == shard and all(device == "cuda" for _, device, _ in dispatch)
        assert (result["dispatch"][1] == 0) == (rank == 0), "only rank 1 receives"
    assert not {i for ids, _, _ in results[0]["shard"][0] for i in ids} & {
        i for ids, _, _ in results[1]["shard"][0] for i in ids
    }
    # A (1, 2) mesh has one data-parallel index: rank 0 loads and its tensor-parallel peer gets the same slice.
    assert results[0]["mesh"][0] == results[1]["mesh"][0]
    assert sorted(i for ids, _, _ in results[0]["mesh"][0] for i in ids) == list(range(16))


@pytest.fixture(scope="module", params=["ddp", "dispatch", "fsdp_full", "fsdp_sharded"])
def gpu_fit(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, str]:
    if torch.cuda.device_count() < 2:
        pytest.skip(
            f"needs 2 CUDA devices, found {torch.cuda.device_count()}; run `make gpu-check` on a GPU machine"
        )
    out = tmp_path_factory.mktemp(request.param)
    return request.param, out, run_command(script("gpu_fits", request.param, str(out)), timeout=600)


def test_two_gpu_fit_shards_and_resumes_exactly(gpu_fit: tuple[str, Path, str]) -> None:
    kind, out, output = gpu_fit
    full, stop, resume = (read_records(out / run, "fit", 2) for run in ("full", "stop", "resume"))
    for epoch in (0, 1):
        ids = [i for rank in full for e, _, step in rank["train"] if e == epoch for i in step]
        # 22 samples, 2 GPUs x 2 per step: 6 steps, the last padded (dispatch pads only to a multiple of 2).
        assert sorted(set(ids)) == list(range(22)) and len(ids) == (22 if kind == "dispatch" else 24)
    for rank in (0, 1):
        assert all(device == f"cuda:{rank}" for device in full[rank]["devices"])
        assert full[rank]["train"][:3] == stop[rank]["train"]
        assert full[rank]["train"][3:] == resume[rank]["train"], "the resume continues at step 3"
        assert resume[rank]["lr"] == full[rank]["lr"][3:]
        assert resume[rank]["weights"] == pytest.approx(full[rank]["weights"], rel=1e-6, abs=1e-7)
        assert sorted(i for ids in full[rank]["val"][:4] for i in ids) == list(range(13))
    assert all(summary.endswith(": OK") for summary in full[0]["audits"]) and len(full[0]["audits"]) == 2
    assert "step schedulers x2 per optimizer step" in output
