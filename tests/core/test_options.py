"""One home per option (docs/DESIGN.md, "Options"): ``prepare_data_loader`` and the strategies agree with
``ShardOptions`` / ``StrategyOptions`` in names, defaults and annotations, and the documentation's options
table is rendered from them (docs/hooks.py), with no hand-written copy anywhere."""

from __future__ import annotations

import importlib.util
import inspect
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from lightning_shard import (
    ShardFabricStrategy,
    ShardFSDPStrategy,
    ShardModelParallelStrategy,
    ShardOptions,
    ShardStrategy,
    prepare_data_loader,
)
from lightning_shard.options import (
    StrategyOptions,
    option_names,
    option_table,
    strategy_default,
)

ROOT = Path(__file__).parents[2]


def _docs_hook() -> Any:
    """docs/hooks.py, the MkDocs hook that renders the options table (not a package: loaded by path)."""
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parameters(function: Any) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(function).parameters)


def test_prepare_data_loader_takes_every_loader_option() -> None:
    parameters = _parameters(prepare_data_loader)
    for option in fields(ShardOptions):
        parameter = parameters[option.name]
        assert parameter.default == option.default, option.name
        assert parameter.annotation == option.type, option.name


def _check_loader_options(strategy: type) -> None:
    parameters = _parameters(strategy.__init__)
    for option in fields(ShardOptions):
        parameter = parameters[option.name]
        assert parameter.default == strategy_default(option), option.name
        assert parameter.annotation == option.type, option.name
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, option.name


@pytest.mark.parametrize("strategy", [ShardStrategy, ShardModelParallelStrategy, ShardFSDPStrategy])
def test_strategies_take_every_option(strategy: type) -> None:
    _check_loader_options(strategy)
    parameters = _parameters(strategy.__init__)
    for option in fields(StrategyOptions):
        parameter = parameters[option.name]
        assert (parameter.default, parameter.annotation) == (option.default, option.type), option.name
    built = strategy()
    assert built.options == ShardOptions(rng_types=("generator",))
    assert built.strategy_options == StrategyOptions()


def test_fabric_strategy_takes_every_loader_option() -> None:
    _check_loader_options(ShardFabricStrategy)
    assert ShardFabricStrategy().options == ShardOptions(rng_types=("generator",))


def test_the_options_page_renders_every_option_from_the_dataclasses() -> None:
    hook = _docs_hook()
    source = (ROOT / "docs" / "options.md").read_text()
    assert source.count(hook.MARKER) == 1, "docs/options.md must hold the table's marker once"
    rendered = hook.render(source)
    assert option_table() in rendered and hook.MARKER not in rendered
    for cls in (ShardOptions, StrategyOptions):
        for option in fields(cls):
            assert f"| `{option.name}`" in rendered and option.metadata["doc"], option.name


def test_no_hand_written_copy_of_the_table() -> None:
    names = "|".join(name for cls in (ShardOptions, StrategyOptions) for name in option_names(cls))
    row = re.compile(rf"^\| `({names})`( \(strategy only\))? \| `", re.MULTILINE)
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        copied = row.findall(page.read_text())
        assert not copied, (
            f"{page.name} copies rows of the options table {copied}: use docs/options.md's marker"
        )


def test_pick_takes_the_option_names_and_leaves_the_other_keys() -> None:
    options = ShardOptions.pick({"split_batches": True, "self": object(), "kwargs": {}})
    assert options == ShardOptions(split_batches=True)
    assert StrategyOptions.pick({"audit": True, "split_batches": True}) == StrategyOptions(audit=True)
