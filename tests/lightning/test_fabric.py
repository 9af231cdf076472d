"""``ShardFabricStrategy``: ``lightning.fabric.Fabric`` shards the loaders of ``fabric.setup_dataloaders``
with ``prepare_data_loader``, and ``fabric.save`` / ``fabric.load`` resume them exactly.

The real run is ``tests/scripts/fabric_run.py`` (2 processes, gloo); the rest needs no process group.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import pytest
from lightning.fabric.strategies import STRATEGY_REGISTRY

from lightning_shard import DataLoaderShard, ShardFabricStrategy, ShardOptions
from tests.helpers.lightning_app import loader
from tests.helpers.runner import run_command, script


def test_registered_in_fabrics_registry() -> None:
    for name, start_method in (("shard", "popen"), ("shard_spawn", "spawn"), ("shard_notebook", "fork")):
        entry = STRATEGY_REGISTRY[name]
        assert entry["strategy"] is ShardFabricStrategy and entry["init_params"] == {
            "start_method": start_method
        }
    fabric = L.Fabric(accelerator="cpu", devices=2, strategy="shard")
    assert isinstance(fabric.strategy, ShardFabricStrategy)


def test_process_dataloader_shards_instead_of_a_distributed_sampler() -> None:
    strategy = ShardFabricStrategy(split_batches=True)
    L.Fabric(accelerator="cpu", devices=2, strategy=strategy)  # NOTE: not launched: rank 0 of 2, no group
    assert strategy.distributed_sampler_kwargs is None
    assert strategy.options == ShardOptions(split_batches=True, rng_types=("generator",))
    sharded = strategy.process_dataloader(loader(10, 2))
    assert isinstance(sharded, DataLoaderShard) and sharded.sharding.num_processes == 2
    assert [batch["id"].tolist() for batch in sharded] == [[0], [2], [4], [6], [8]]
    assert strategy.process_dataloader(sharded) is sharded, "never sharded twice"


def _records(out: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads((out / f"{name}_rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.lightning
def test_fabric_run_shards_and_resumes_exactly(tmp_path: Path) -> None:
    run_command(script("fabric_run", str(tmp_path)), timeout=240)
    full, stop, resume = (_records(tmp_path, name) for name in ("full", "stop", "resume"))
    for epoch in (0, 1):
        ids = [i for rank in full for e, step in rank["steps"] if e == epoch for i in step]
        # 22 samples, 2 processes x 2 per step: 6 steps, the last padded with 2 samples.
        assert sorted(set(ids)) == list(range(22)) and len(ids) == 24
    for rank in (0, 1):
        assert full[rank]["steps"][:3] == stop[rank]["steps"]
        assert full[rank]["steps"][3:] == resume[rank]["steps"], "fabric.load continues at step 3"
        assert resume[rank]["weights"] == pytest.approx(full[rank]["weights"], rel=1e-12, abs=1e-12)
    plain = [[i for _, step in rank["steps"] for i in step] for rank in _records(tmp_path, "plain")]
    assert plain == [[0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21], [2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 0, 1]]

    uneven = _records(tmp_path, "uneven")
    assert sorted(i for rank in uneven for batch in rank["ids"] for i in batch) == list(range(22))
    assert [len(rank["ids"]) for rank in uneven] == [6, 5], "even_batches=False: no padding"
    assert any("gives the training processes [6, 5] batches" in text for text in uneven[0]["warnings"])
    assert any("A warning, not a refusal" in text for text in uneven[0]["warnings"])
    assert uneven[1]["warnings"] == [], "rank zero warns"
