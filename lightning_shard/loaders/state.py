"""The saved state of a loader: plain, JSON-serialisable, versioned, identical on every process.

It records where the epoch stands globally (how many batches of the user's loader were consumed), not
per process, so it can be loaded on another number of processes (docs/DESIGN.md, "Global state" and
"Elastic resume"), and the topology it was written under, so that a difference at resume is either
handled or refused by name.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

from lightning_shard.sampling.balance import EvenBatches

STATE_FORMAT = "lightning_shard.loader"
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 1 (lightning_shard 0.1) lacks the optional fields below; they then take their defaults."""


@dataclass(frozen=True)
class LoaderState:
    """Where a loader stands in its epoch.

    Attributes:
        mode: ``"shard"`` or ``"dispatch"``.
        epoch: the epoch being iterated.
        steps: steps taken in this epoch, each process one batch per step (``base_steps`` of them
            under an earlier sharding of the epoch).
        base: batches of the user's loader (samples, for an iterable dataset) consumed before this
            run's sharding of the epoch began; non-zero only after an elastic restore.
        consumed: ``base`` plus what the processes consumed together since: ``(steps - base_steps) * N``
            batches without ``split_batches``, ``steps - base_steps`` with it (times the global batch size
            for samples).
        num_processes, split_batches, even_batches, drop_last, batch_size: the sharding options.
        dataset_length: ``len(dataset)``, or ``None`` when it has none.
        generator_state: the sampler's generator state at the start of the epoch (base64), if any.
        sampler_seed: the seed of a ``SeedableRandomSampler`` (whose order ignores the generator's
            state), if the loader has one.
        base_steps: steps of this epoch taken before ``base`` was consumed, under another number of
            processes; they keep counting, so a step counter saved beside this state stays right.
        world_size: processes in the job (more than ``num_processes`` when tensor-parallel peers share
            batches); ``None`` without a process group.
        num_workers: the loader's ``DataLoader`` workers.
        sampler: the kind of index source: the index sampler's class name, ``"iterable"`` (a strided
            stream), ``"native-stream"`` or ``"self-split-stream"``.
        streams: for a stream each process reads its own share of, one entry per process (rank
            order): ``{"ended_at": step}``, the step at which that process's share ended in this epoch
            (``None``: not yet); it tells where each process is, padding included (docs/DESIGN.md,
            "Streaming data").
    """

    mode: str
    epoch: int
    steps: int
    base: int
    consumed: int
    num_processes: int
    split_batches: bool
    even_batches: EvenBatches
    drop_last: bool
    batch_size: int | None
    dataset_length: int | None
    generator_state: str | None = None
    sampler_seed: int | None = None
    base_steps: int = 0
    world_size: int | None = None
    num_workers: int = 0
    sampler: str | None = None
    streams: list[dict[str, Any]] | None = None

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
        if state.get("version") not in READABLE_VERSIONS:
            raise ValueError(
                f"`state_dict` has version {state.get('version')!r}, but this release reads versions "
                f"{list(READABLE_VERSIONS)}. Load it with the lightning_shard release that wrote it, or start "
                "the epoch afresh."
            )
        names = [field.name for field in fields(cls)]
        missing = [name for name in names if name not in state and name not in _OPTIONAL]
        if missing:
            raise ValueError(
                f"`state_dict` is missing the keys {missing}; it is truncated or was edited. "
                "Pass the complete dict returned by the loader's `state_dict()`."
            )
        values: dict[str, Any] = {name: state[name] for name in names if name in state}
        _check_values(values)
        return cls(**values)


_COUNTS = ("epoch", "steps", "base", "consumed", "base_steps", "num_workers")
_FLAGS = ("split_batches", "drop_last")
_OPTIONAL_COUNTS = ("batch_size", "dataset_length")


def _check_values(values: dict[str, Any]) -> None:
    """Refuse an edited state now, rather than a confusing failure at the next ``iter()``."""
    for name, value in values.items():
        if not _valid(name, value):
            _refuse(name, value)
    if values.get("base_steps", 0) > values["steps"]:
        _refuse("base_steps", values["base_steps"])


def _refuse(name: str, value: Any) -> None:
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
    if name == "world_size":
        return value is None or (is_int and value >= 1)
    if name in _OPTIONAL_COUNTS:
        return value is None or (is_int and value >= 0)
    if name == "even_batches":
        return isinstance(value, bool) or value == "balanced"
    if name in _FLAGS:
        return isinstance(value, bool)
    if name == "mode":
        return value in ("shard", "dispatch")
    if name == "sampler_seed":
        return value is None or is_int
    if name == "streams":
        return value is None or (isinstance(value, list) and all(_valid_stream(entry) for entry in value))
    return value is None or isinstance(value, str)


_OPTIONAL = (
    "generator_state",
    "sampler_seed",
    "base_steps",
    "world_size",
    "num_workers",
    "sampler",
    "streams",
)


def _valid_stream(entry: Any) -> bool:
    if not isinstance(entry, dict) or set(entry) != {"ended_at"}:
        return False
    end = entry["ended_at"]
    return end is None or (isinstance(end, int) and not isinstance(end, bool) and end >= 0)


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
