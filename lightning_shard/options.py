"""``ShardOptions``: the one object that carries the sharding knobs down to ``prepare_data_loader``."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from lightning_shard._checks import check_bool, check_seed
from lightning_shard.rng import RNG_TYPES


@dataclass(frozen=True)
class ShardOptions:
    """How loaders are sharded; the strategy, the datamodule and ``prepare_data_loader`` share it.

    Attributes (all as ``prepare_data_loader``'s parameters of the same names):
        split_batches: split each batch of the user's loader across processes (global batch ``B``)
            instead of giving each process whole batches (global batch ``B * N``).
        even_batches: pad the end of the epoch so every process gets as many batches.
        dispatch_batches: process 0 loads and sends each process its slice; ``None``: only for an
            ``IterableDataset`` with ``put_on_device``.
        put_on_device: move batches to the loader's device.
        rng_types: generators copied from process 0 at each epoch: ``"torch"``, ``"cuda"``, ``"generator"``.
        use_seedable_sampler: replace a ``RandomSampler`` by a ``SeedableRandomSampler``.
        data_seed: the seed of that sampler (``None``: ``torch.initial_seed()``).
        non_blocking: asynchronous host-to-device copies.
        use_stateful_dataloader: back loaders with torchdata's ``StatefulDataLoader``.
        slice_fn_for_dispatch: how a dispatched batch is cut into per-process slices.

    Raises:
        ValueError / TypeError: on ``dispatch_batches=True`` without ``put_on_device``, an unknown
            ``rng_types`` entry, a non-integer ``data_seed``, a flag that is not a bool, or a
            ``slice_fn_for_dispatch`` that is not callable.
    """

    split_batches: bool = False
    even_batches: bool = True
    dispatch_batches: bool | None = None
    put_on_device: bool = False
    rng_types: tuple[str, ...] | None = None
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False
    slice_fn_for_dispatch: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        for name in _FLAGS:
            check_bool(name, getattr(self, name))
        if self.dispatch_batches is not None:
            check_bool("dispatch_batches", self.dispatch_batches)
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
            if isinstance(self.rng_types, str):
                object.__setattr__(self, "rng_types", (self.rng_types,))
            names = tuple(str(getattr(kind, "value", kind)) for kind in self.rng_types)  # type: ignore[union-attr]
            unknown = [name for name in names if name not in RNG_TYPES]
            if unknown:
                raise ValueError(
                    f"`rng_types` contains {unknown}, which are not known generators. "
                    f"Use any of {list(RNG_TYPES)}, e.g. `rng_types=['generator']`."
                )
            object.__setattr__(self, "rng_types", names)

    def replace(self, **changes: Any) -> ShardOptions:
        """A copy with ``changes`` applied (and checked again)."""
        known = [field.name for field in fields(self)]
        unknown = sorted(set(changes) - set(known))
        if unknown:
            close = [match for name in unknown for match in difflib.get_close_matches(name, known, n=1)]
            hint = f"Did you mean {', '.join(f'`{name}`' for name in close)}? " if close else ""
            raise TypeError(
                f"`ShardOptions.replace` got unknown option(s) {unknown}. {hint}Use only these: {known}."
            )
        return replace(self, **changes)

    def as_kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of ``prepare_data_loader``."""
        kwargs = asdict(self)
        kwargs["rng_types"] = None if self.rng_types is None else list(self.rng_types)
        return kwargs


_FLAGS = (
    "split_batches",
    "even_batches",
    "put_on_device",
    "use_seedable_sampler",
    "non_blocking",
    "use_stateful_dataloader",
)
