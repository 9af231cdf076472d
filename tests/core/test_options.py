"""One home per option (docs/DESIGN.md, "Options"): ``prepare_data_loader``, the strategies and the README's
option table all agree with ``ShardOptions`` / ``StrategyOptions`` in names, defaults and annotations."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from lightning_shard import (
    ShardFabricStrategy,
    ShardFSDPStrategy,
    ShardModelParallelStrategy,
    ShardOptions,
    ShardStrategy,
    StrategyOptions,
    prepare_data_loader,
)
from lightning_shard.options import option_fields, option_table, strategy_default

README = Path(__file__).parents[2] / "README.md"


def _parameters(function: Any) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(function).parameters)


def test_prepare_data_loader_takes_every_loader_option() -> None:
    parameters = _parameters(prepare_data_loader)
    for option in option_fields(ShardOptions):
        parameter = parameters[option.name]
        assert parameter.default == option.default, option.name
        assert parameter.annotation == option.type, option.name


def _check_loader_options(strategy: type) -> None:
    parameters = _parameters(strategy.__init__)
    for option in option_fields(ShardOptions):
        parameter = parameters[option.name]
        assert parameter.default == strategy_default(option), option.name
        assert parameter.annotation == option.type, option.name
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, option.name


@pytest.mark.parametrize("strategy", [ShardStrategy, ShardModelParallelStrategy, ShardFSDPStrategy])
def test_strategies_take_every_option(strategy: type) -> None:
    _check_loader_options(strategy)
    parameters = _parameters(strategy.__init__)
    for option in option_fields(StrategyOptions):
        parameter = parameters[option.name]
        assert (parameter.default, parameter.annotation) == (option.default, option.type), option.name
    built = strategy()
    assert built.options == ShardOptions(rng_types=("generator",))
    assert built.strategy_options == StrategyOptions()


def test_fabric_strategy_takes_every_loader_option() -> None:
    _check_loader_options(ShardFabricStrategy)
    assert ShardFabricStrategy().options == ShardOptions(rng_types=("generator",))


def test_every_option_is_documented_in_the_readme_table() -> None:
    table = option_table()
    assert table in README.read_text(), "the README's option table differs from `option_table()`"
    for cls in (ShardOptions, StrategyOptions):
        for option in option_fields(cls):
            assert f"| `{option.name}`" in table and option.metadata["doc"]


def test_from_kwargs_takes_only_option_names() -> None:
    options = ShardOptions.from_kwargs({"split_batches": True, "self": object(), "kwargs": {}})
    assert options == ShardOptions(split_batches=True)
    assert StrategyOptions.from_kwargs({"audit": True, "split_batches": True}) == StrategyOptions(audit=True)
