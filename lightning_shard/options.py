"""The one home of every option: its name, default, type and documentation.

``ShardOptions`` carries the loader options from the strategy (or a ``ShardDataModule``'s per-stage overrides)
down to ``prepare_data_loader``; ``StrategyOptions`` holds the few only a strategy has. The flat keyword
signatures that take them (users and LightningCLI need them) are tested against these fields, and the
documentation's options table is rendered from them (``option_table()``, docs/options.md).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, TypeVar

from lightning_shard._checks import check_bool, check_seed
from lightning_shard.comm.random_states import rng_names
from lightning_shard.sampling.balance import EvenBatches, check_even_batches
from lightning_shard.sampling.native_stream import ITERABLE_SHARDING, IterableSharding

_DOC = "doc"
_STRATEGY_DEFAULT = "strategy_default"


def _option(default: Any, doc: str, **metadata: Any) -> Any:
    """A dataclass field with its documentation; ``strategy_default=`` when a strategy defaults otherwise."""
    return field(default=default, metadata={_DOC: doc, **metadata})


_O = TypeVar("_O", bound="_Options")


class _Options:
    @classmethod
    def pick(cls: type[_O], values: Mapping[str, Any]) -> _O:
        """The options among ``values`` (a flat signature's ``locals()``, a strategy's arguments), other keys
        left. Not a check: the signature that takes a misspelled option refuses it (``check_keywords``)."""
        return cls(**{name: values[name] for name in option_names(cls) if name in values})


@dataclass(frozen=True)
class ShardOptions(_Options):
    """How loaders are sharded; the strategies, the datamodule and ``prepare_data_loader`` share it.

    Each field's documentation is in its ``metadata["doc"]`` (rendered in the documentation's options table).

    Raises:
        ValueError / TypeError: on ``dispatch_batches=True`` without ``put_on_device``, an unknown
            ``rng_types`` entry, a non-integer ``data_seed``, a flag that is not a bool, or a
            ``slice_fn_for_dispatch`` that is not callable.
    """

    split_batches: bool = _option(
        False,
        "`False`: each process gets whole batches of the user's loader (global batch `B x N`). `True`: every "
        "batch is split across processes (global batch `B`; `B` must be a multiple of `N`).",
    )
    even_batches: EvenBatches = _option(
        True,
        "Pad the end of the epoch with samples from its start so every process gets as many equally sized "
        "batches. `False`: no duplicates; the last batches may be short or missing on some processes. "
        '`"balanced"`: no duplicates and as many steps everywhere: the last step is split into real samples '
        "(sizes differ by at most one; map-style data without dispatch, else it pads). Under a strategy, "
        'validation and test use `"balanced"` whatever this says.',
    )
    dispatch_batches: bool | None = _option(
        None,
        "Process 0 loads and sends each process its slice. `None`: only for an `IterableDataset` with "
        "`put_on_device=True`. Needs `put_on_device=True`.",
    )
    put_on_device: bool = _option(
        False,
        "Move batches to the loader's device. Under a strategy Lightning's `batch_to_device` already moves "
        "them; set it for dispatch.",
    )
    rng_types: Sequence[str] | None = _option(
        None,
        'Generators copied from process 0 at each epoch: `"torch"`, `"cuda"`, `"generator"` (the sampler\'s).',
        strategy_default=("generator",),
    )
    use_seedable_sampler: bool = _option(
        False,
        "Replace a `RandomSampler` by a `SeedableRandomSampler` whose order is a pure function of "
        "`(data_seed, epoch)`.",
    )
    data_seed: int | None = _option(
        None, "Seed of that sampler (`None`: process 0's `torch.initial_seed()`, the same on every process)."
    )
    non_blocking: bool = _option(False, "Asynchronous host-to-device copies (pair with `pin_memory=True`).")
    use_stateful_dataloader: bool = _option(False, "Back loaders with torchdata's `StatefulDataLoader`.")
    slice_fn_for_dispatch: Callable[..., Any] | None = _option(
        None,
        "How a dispatched global batch is cut per process, `fn(batch, slice, process_index=, "
        "num_processes=)`; default slices every tensor and list of scalars along dim 0.",
    )

    iterable_sharding: IterableSharding = _option(
        "auto",
        'How an `IterableDataset` is split across processes. `"native"`: each process reads only its share '
        "(a dataset with `n_shards` and `shard(num_shards, index)`, e.g. a Hugging Face "
        '`datasets.IterableDataset`; one that already splits itself by rank is passed through). `"stride"`: '
        'every process reads the whole stream and keeps its slice (the reference). `"auto"`: native when the '
        "dataset can give every process a shard, else stride (rank 0 says why).",
    )

    scalable_shuffle: bool = _option(
        False,
        "Shuffle with a keyed permutation of `(data_seed, epoch)` that each process evaluates only at its own "
        "positions: `O(n / N)` time and `O(batch)` memory per epoch instead of a whole `randperm` on every "
        'process (docs/DESIGN.md, "Scale"). A different order from `RandomSampler`\'s; for a loader with '
        "`shuffle=True` (a plain `RandomSampler`, no `generator`); sequential loaders are left as they are. "
        "Takes precedence over `use_seedable_sampler`.",
    )

    def __post_init__(self) -> None:
        for option in fields(self):
            value = getattr(self, option.name)
            # NOTE: the annotations' text (`from __future__ import annotations`); `dispatch_batches` may be None.
            if option.type == "bool" or (option.type == "bool | None" and value is not None):
                check_bool(option.name, value)
        check_even_batches(self.even_batches)
        if self.iterable_sharding not in ITERABLE_SHARDING:
            raise ValueError(
                f"`iterable_sharding` must be one of {list(ITERABLE_SHARDING)}, got {self.iterable_sharding!r}. "
                'Use "auto" (the default), "native" or "stride".'
            )
        if self.slice_fn_for_dispatch is not None and not callable(self.slice_fn_for_dispatch):
            raise TypeError(
                f"`slice_fn_for_dispatch` must be callable, got {self.slice_fn_for_dispatch!r}. Pass a function "
                "`(batch, slice, process_index=, num_processes=) -> batch`, or None to cut along dimension 0."
            )
        if self.dispatch_batches and not self.put_on_device:
            raise ValueError(
                "`dispatch_batches=True` needs `put_on_device=True`: dispatched batches are sent from "
                "process 0 as device tensors. Set `put_on_device=True`, or `dispatch_batches=False`."
            )
        check_seed("data_seed", self.data_seed)
        if self.rng_types is not None:
            object.__setattr__(self, "rng_types", rng_names(self.rng_types))

    def replace(self, **changes: Any) -> ShardOptions:
        """A copy with ``changes`` applied (and checked again).

        Raises:
            TypeError: on an unknown option name, with the closest known one.
        """
        check_known(type(self), changes, "ShardOptions.replace")
        return replace(self, **changes)


@dataclass(frozen=True)
class StrategyOptions(_Options):
    """The options only a strategy has (on top of ``ShardOptions``)."""

    step_scheduler_with_optimizer: bool = _option(
        True,
        'Step `interval="step"` schedulers N times per optimizer step (once with `split_batches`); `False` '
        "steps them once, as Lightning does.",
    )
    audit: bool = _option(
        False,
        "Check every training epoch's samples: rank 0 logs the samples covered, the duplicates beyond the "
        "padding and the samples missing.",
    )
    audit_raise: bool = _option(False, "With `audit`, raise on every process after an epoch with a problem.")
    gather_predictions: bool = _option(
        True,
        "`trainer.predict` returns on rank 0 what one process would: every process's predictions, each "
        "sample once, in order. `False` keeps Lightning's per-rank results (less memory on rank 0).",
    )

    def __post_init__(self) -> None:
        for option in fields(self):
            check_bool(option.name, getattr(self, option.name))
        if self.audit_raise and not self.audit:
            raise ValueError(
                "`audit_raise=True` raises when the shard audit finds a problem, but `audit=False` turns the "
                "audit off. Set `audit=True` as well, or leave `audit_raise=False`."
            )


def option_names(cls: type) -> list[str]:
    return [option.name for option in fields(cls)]


def strategy_default(option: Field[Any]) -> Any:
    """The default of ``option`` under a strategy (the same as elsewhere unless documented otherwise)."""
    return option.metadata.get(_STRATEGY_DEFAULT, option.default)


def check_known(cls: type, changes: Mapping[str, Any], where: str) -> None:
    """Refuse option names that ``cls`` does not have, suggesting the closest.

    Raises:
        TypeError: on an unknown name.
    """
    known = option_names(cls)
    unknown = sorted(set(changes) - set(known))
    if unknown:
        close = [match for name in unknown for match in difflib.get_close_matches(name, known, n=1)]
        hint = f"Did you mean {', '.join(f'`{name}`' for name in close)}? " if close else ""
        raise TypeError(f"`{where}` got unknown option(s) {unknown}. {hint}Use only these: {known}.")


def option_table() -> str:
    """The options table of docs/options.md, rendered from the fields above when the site is built."""
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for cls, suffix in ((ShardOptions, ""), (StrategyOptions, " (strategy only)")):
        for option in fields(cls):
            default = f"`{option.default!r}`"
            if _STRATEGY_DEFAULT in option.metadata:
                default += f" (`{option.metadata[_STRATEGY_DEFAULT]!r}` under a strategy)"
            rows.append(f"| `{option.name}`{suffix} | {default} | {option.metadata[_DOC]} |")
    return "\n".join(rows)
