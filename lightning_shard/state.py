"""The saved state of a loader: plain, JSON-serialisable, versioned, identical on every process.

It records where the epoch stands globally (how many batches of the user's loader were consumed), not
per process, so it can be loaded on another number of processes (SPEC D4, D5).
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

STATE_FORMAT = "lightning_shard.loader"
STATE_VERSION = 1


@dataclass(frozen=True)
class LoaderState:
    """Where a loader stands in its epoch.

    Attributes:
        mode: ``"shard"`` or ``"dispatch"``.
        epoch: the epoch being iterated.
        steps: batches each process has yielded in this epoch since ``base``.
        base: batches of the user's loader (samples, for an iterable dataset) consumed before this
            run's sharding of the epoch began; non-zero only after an elastic restore.
        consumed: ``base`` plus what the processes consumed together since: ``steps * N`` batches
            without ``split_batches``, ``steps`` with it (times the global batch size for samples).
        num_processes, split_batches, even_batches, drop_last, batch_size: the sharding options.
        dataset_length: ``len(dataset)``, or ``None`` when it has none.
        generator_state: the sampler's generator state at the start of the epoch (base64), if any.
        sampler_seed: the seed of a ``SeedableRandomSampler`` (whose order ignores the generator's
            state), if the loader has one.
    """

    mode: str
    epoch: int
    steps: int
    base: int
    consumed: int
    num_processes: int
    split_batches: bool
    even_batches: bool
    drop_last: bool
    batch_size: int | None
    dataset_length: int | None
    generator_state: str | None = None
    sampler_seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The state as plain data, with its format and version."""
        return {"format": STATE_FORMAT, "version": STATE_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, state: Any) -> LoaderState:
        """Parse ``state`` as written by ``to_dict``.

        Raises:
            TypeError / ValueError: on something that is not such a state, another version, or a
                truncated dict.
        """
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(
                f"`state_dict` is not a lightning_shard loader state (got {_describe(state)}). "
                "Pass the dict returned by the loader's `state_dict()`."
            )
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"`state_dict` has version {state.get('version')!r}, but this release reads version "
                f"{STATE_VERSION}. Load it with the lightning_shard release that wrote it, or start the epoch afresh."
            )
        names = [field.name for field in fields(cls)]
        missing = [name for name in names if name not in state and name not in _OPTIONAL]
        if missing:
            raise ValueError(
                f"`state_dict` is missing the keys {missing}; it is truncated or was edited. "
                "Pass the complete dict returned by the loader's `state_dict()`."
            )
        values: dict[str, Any] = {name: state.get(name) for name in names}
        _check_values(values)
        return cls(**values)


_COUNTS = ("epoch", "steps", "base", "consumed")
_FLAGS = ("split_batches", "even_batches", "drop_last")
_OPTIONAL_COUNTS = ("batch_size", "dataset_length")


def _check_values(values: dict[str, Any]) -> None:
    """Refuse an edited state now, rather than a confusing failure at the next ``iter()``."""
    for name, value in values.items():
        if not _valid(name, value):
            raise ValueError(
                f"`state_dict[{name!r}]` is {value!r}, which a loader never writes; the state was edited or "
                "corrupted. Pass the dict returned by the loader's `state_dict()` unchanged."
            )


def _valid(name: str, value: Any) -> bool:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if name in _COUNTS:
        return is_int and value >= 0
    if name == "num_processes":
        return is_int and value >= 1
    if name in _OPTIONAL_COUNTS:
        return value is None or (is_int and value >= 0)
    if name in _FLAGS:
        return isinstance(value, bool)
    if name == "mode":
        return value in ("shard", "dispatch")
    if name == "sampler_seed":
        return value is None or is_int
    return value is None or isinstance(value, str)


_OPTIONAL = ("generator_state", "sampler_seed")


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"a dict with keys {sorted(map(str, value))[:6]}"
    return f"{type(value).__name__}"


def encode_generator_state(generator: torch.Generator | None) -> str | None:
    """A generator's state as a base64 string, or ``None``."""
    if generator is None:
        return None
    return base64.b64encode(generator.get_state().numpy().tobytes()).decode("ascii")


def decode_generator_state(encoded: str) -> torch.Tensor:
    """The inverse of ``encode_generator_state``: a ``ByteTensor`` for ``Generator.set_state``."""
    raw = bytearray(base64.b64decode(encoded))
    return torch.frombuffer(raw, dtype=torch.uint8).clone()
