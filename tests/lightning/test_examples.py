"""The examples: the LightningCLI configuration, and the main example end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lightning_shard import ShardOptions, ShardStrategy
from tests.helpers.runner import run_command

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_cli_config_builds_the_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from blobs import BlobsData, Classifier
    from lightning.pytorch.cli import LightningCLI

    arguments = [
        "--config",
        str(EXAMPLES / "cli_config.yaml"),
        "--trainer.strategy.init_args.split_batches=true",
    ]
    cli = LightningCLI(Classifier, BlobsData, run=False, args=arguments, save_config_callback=None)
    strategy = cli.trainer.strategy
    assert isinstance(strategy, ShardStrategy)
    assert strategy.options == ShardOptions(
        split_batches=True, rng_types=("generator",), use_seedable_sampler=True, data_seed=7
    )
    assert strategy._ddp_kwargs["find_unused_parameters"] is False
    assert strategy.step_scheduler_with_optimizer


@pytest.mark.lightning
def test_train_example_resumes_without_losing_a_sample() -> None:
    output = run_command([sys.executable, str(EXAMPLES / "train.py")], timeout=120)
    assert "lightning_shard plan: 2 processes (shard), batch size 32 per process and 64 global" in output
    assert "steps 0-7 in phase 1 + steps 8-31 in phase 2" in output
    assert "no sample was lost or repeated across the resume." in output
