"""Every ``Shard*`` strategy refuses an unknown keyword when it is built, naming the closest option or
parent argument, and passes its parents' real keywords through (``check_keywords``,
``lightning_shard/lightning/strategy.py``). Construction only: the refusal must come before any fit."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from lightning.fabric import Fabric
from lightning.pytorch import Trainer

from lightning_shard import (
    ShardFabricStrategy,
    ShardFSDPStrategy,
    ShardModelParallelStrategy,
    ShardOptions,
    ShardStrategy,
    prepare_data_loader,
)
from lightning_shard.lightning.strategy import SET_BY_THE_STRATEGY
from lightning_shard.options import option_names

STRATEGIES = [ShardStrategy, ShardModelParallelStrategy, ShardFSDPStrategy, ShardFabricStrategy]
LOOK_ALIKE = "dat\u0430_seed"  # NOTE: U+0430 CYRILLIC SMALL LETTER A in place of the ASCII `a`.


def _refusal(strategy: type, **kwargs: Any) -> str:
    with pytest.raises(TypeError) as refused:
        strategy(**kwargs)
    return str(refused.value)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
def test_a_typo_is_refused_with_the_closest_option(strategy: type) -> None:
    message = _refusal(strategy, split_batch=True)
    assert f"`{strategy.__name__}` got an unknown keyword argument `split_batch=True`" in message
    assert "Did you mean `split_batches`?" in message


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
def test_a_look_alike_is_refused_with_the_character_named(strategy: type) -> None:
    assert LOOK_ALIKE != "data_seed"
    message = _refusal(strategy, **{LOOK_ALIKE: 0})
    assert f"`{LOOK_ALIKE}=0`" in message
    assert "U+0430 CYRILLIC SMALL LETTER A" in message
    assert "Did you mean `data_seed`?" in message


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
def test_a_parent_argument_misspelt_is_refused_with_the_parent_name(strategy: type) -> None:
    message = _refusal(strategy, process_group_backnd="gloo")
    assert "Did you mean `process_group_backend`?" in message


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
def test_a_parent_argument_passes_through(strategy: type) -> None:
    built = strategy(process_group_backend="gloo", data_seed=3)
    assert built.process_group_backend == "gloo"
    assert built.options.data_seed == 3


def test_wrapper_arguments_pass_through_ddp() -> None:
    # NOTE: Lightning keeps `DistributedDataParallel`'s keywords in `_ddp_kwargs` until the model is wrapped;
    # read here only to show they arrived (a fit would show no more on CPU).
    assert ShardStrategy(find_unused_parameters=True)._ddp_kwargs == {"find_unused_parameters": True}
    assert ShardFabricStrategy(static_graph=True)._ddp_kwargs == {"static_graph": True}


def test_wrapper_arguments_pass_through_fsdp() -> None:
    assert ShardFSDPStrategy(use_orig_params=False).kwargs["use_orig_params"] is False


def test_registered_names_still_build() -> None:
    # NOTE: the registry passes `start_method` (a `DDPStrategy` argument) as an init argument.
    assert isinstance(
        Trainer(strategy="shard", accelerator="cpu", devices=2, logger=False).strategy, ShardStrategy
    )
    assert isinstance(
        Fabric(strategy="shard_spawn", accelerator="cpu", devices=2).strategy, ShardFabricStrategy
    )


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.__name__)
@pytest.mark.parametrize(
    ("name", "value"), [("process_index", 0), ("torch_device_mesh", None), ("num_processes", 2)]
)
def test_an_argument_of_prepare_data_loader_says_the_strategy_sets_it(
    strategy: type, name: str, value: Any
) -> None:
    message = _refusal(strategy, **{name: value})
    assert f"`{name}={value!r}`" in message
    assert f"`{name}` is an argument of `prepare_data_loader`, not an option" in message
    assert "the strategy sets this from the process group" in message and message.endswith("Remove it.")
    assert "Did you mean" not in message, "not `process_group` or `device_mesh`: it is no typo"


def test_every_argument_of_prepare_data_loader_that_is_no_option_is_explained() -> None:
    own = set(inspect.signature(prepare_data_loader).parameters) - set(option_names(ShardOptions))
    assert own == set(SET_BY_THE_STRATEGY)
