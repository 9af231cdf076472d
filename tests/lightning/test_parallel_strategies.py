"""``ShardModelParallelStrategy`` and ``ShardFSDPStrategy`` without a process group: registration, the
parent's arguments kept beside ours, LightningCLI YAML, and FSDP refused on CPU with the fix. Their
fits run in ``test_model_parallel.py`` (CPU) and ``tests/cuda/`` (``make gpu-check``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.strategies import FSDPStrategy, StrategyRegistry
from torch.distributed.fsdp import ShardingStrategy

from lightning_shard import ShardFSDPStrategy, ShardModelParallelStrategy, ShardOptions
from tests.helpers.lightning_app import trainer

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_registered_where_lightning_registers_its_own(tmp_path: Path) -> None:
    assert StrategyRegistry["shard_model_parallel"]["strategy"] is ShardModelParallelStrategy
    assert StrategyRegistry["shard_fsdp"]["strategy"] is ShardFSDPStrategy
    assert not {"shard_fsdp", "shard_model_parallel"} & set(FSDPStrategy.get_registered_strategies())
    for name, cls in (
        ("shard_fsdp", ShardFSDPStrategy),
        ("shard_model_parallel", ShardModelParallelStrategy),
    ):
        assert type(trainer(tmp_path, strategy=name, devices=1).strategy) is cls


def test_fsdp_keeps_every_fsdp_argument() -> None:
    strategy = ShardFSDPStrategy(
        sharding_strategy="SHARD_GRAD_OP",
        state_dict_type="sharded",
        cpu_offload=True,
        limit_all_gathers=True,
        split_batches=True,
        audit=True,
    )
    assert strategy.sharding_strategy is ShardingStrategy.SHARD_GRAD_OP
    assert strategy.cpu_offload.offload_params and strategy.kwargs["limit_all_gathers"] is True
    assert strategy.options == ShardOptions(split_batches=True, rng_types=("generator",))
    assert strategy.strategy_options.audit


def test_fsdp_on_cpu_is_refused_with_the_fix(tmp_path: Path) -> None:
    strategy = trainer(tmp_path, strategy=ShardFSDPStrategy(), devices=1).strategy
    # NOTE: the hook `fit` calls first in each process; calling it here, not `fit`, keeps Lightning's
    # launcher from writing LOCAL_RANK / MASTER_PORT into this process's environment (and the next tests').
    with pytest.raises(ValueError, match="needs CUDA.*`ShardModelParallelStrategy` with `fully_shard`"):
        strategy.setup_environment()


def test_model_parallel_topology_needs_the_mesh() -> None:
    strategy = ShardModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2, even_batches=False)
    assert strategy.options.even_batches is False
    with pytest.raises(RuntimeError, match="device mesh"):
        strategy.topology  # noqa: B018 - the property raises before the processes start


_CONFIGS: dict[str, dict[str, Any]] = {
    "model_parallel": {
        "class_path": "lightning_shard.ShardModelParallelStrategy",
        "init_args": {
            "data_parallel_size": 2,
            "tensor_parallel_size": 1,
            "save_distributed_checkpoint": False,
            "use_seedable_sampler": True,
            "data_seed": 3,
        },
    },
    "fsdp": {
        "class_path": "lightning_shard.ShardFSDPStrategy",
        "init_args": {"sharding_strategy": "NO_SHARD", "state_dict_type": "sharded", "split_batches": True},
    },
}


@pytest.mark.parametrize("kind", sorted(_CONFIGS))
def test_cli_config_builds_the_strategy(kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import yaml
    from lightning.pytorch.cli import LightningCLI

    monkeypatch.syspath_prepend(str(EXAMPLES))
    from blobs import BlobsData, Classifier

    config = yaml.safe_load((EXAMPLES / "cli_config.yaml").read_text())
    config["trainer"].update(strategy=_CONFIGS[kind], devices=1)
    # NOTE: no seeding: `seed_everything` would leave PL_GLOBAL_SEED / PL_SEED_WORKERS in the environment.
    config["seed_everything"] = False
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cli = LightningCLI(
        Classifier, BlobsData, run=False, args=["--config", str(path)], save_config_callback=None
    )
    strategy = cli.trainer.strategy
    if kind == "fsdp":
        assert isinstance(strategy, ShardFSDPStrategy)
        assert strategy.sharding_strategy is ShardingStrategy.NO_SHARD
        assert strategy.options == ShardOptions(split_batches=True, rng_types=("generator",))
    else:
        assert isinstance(strategy, ShardModelParallelStrategy)
        assert (strategy._data_parallel_size, strategy._save_distributed_checkpoint) == (2, False)
        assert strategy.options == ShardOptions(
            use_seedable_sampler=True, data_seed=3, rng_types=("generator",)
        )
