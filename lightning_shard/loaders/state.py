"""The saved state of a loader: plain, JSON-serialisable, versioned, identical on every process, global rather
than per process, refused by name where it cannot continue (docs/DESIGN.md, "Global state", "Elastic resume")."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, get_args

import torch

from lightning_shard.loaders.position import Mode, Position, ShardingInfo
from lightning_shard.sampling.self_split import SHARES_STAY, SelfSplit

STATE_FORMAT = "lightning_shard.loader"
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 1 (lightning_shard 0.1) lacks the optional keys (``_OPTIONAL``); they then take their defaults."""

_POSITION_RENAMED = dict(workers="num_workers", read_before_resume="base", steps_before_resume="base_steps")
"""``Position`` fields saved under another key (the keys the released states have)."""
_POSITION_UNSAVED = ("ended_at", "library")
"""``Position`` fields the state holds otherwise: each process's stream end, in a released state's ``streams``;
a library's own state, in the state's ``library``."""
_WRITTEN_WHEN_SET = ("library",)
"""Keys written only when set (only some streams have them): every other state keeps the keys it had."""
_OPTIONAL = dict.fromkeys(("generator_state", "sampler_seed", "world_size", "sampler", "streams", "library"))
_OPTIONAL.update(base_steps=0, num_workers=0)


@dataclass(frozen=True)
class LoaderState:
    """Where a loader stands in its epoch, and the sharding it stands in, as saved: flat (``to_dict``), the
    fields of ``sharding``, of ``position`` (its ``workers`` as ``num_workers``) and the ones below.

    Attributes:
        sharding: the sharding options and the kind of index source.
        position: the epoch, its steps, ``read_before_resume`` / ``steps_before_resume`` (saved as ``base`` /
            ``base_steps``), the generator state and seed, the workers.
        consumed: ``read_before_resume`` plus what the processes consumed together since, in the sharding's
            ``read_unit``: ``(steps - steps_before_resume) * N`` batches without ``split_batches``,
            ``steps - steps_before_resume`` with it (times the batch size for a stream's elements).
        world_size: processes in the job (more than ``num_processes`` when tensor-parallel peers share
            batches); ``None`` without a process group.
        streams: for a stream each process reads its own share of, ``[]``: each process finds where
            its share ended again as it reads it on resume (docs/DESIGN.md, "Streaming data"). States of
            0.2 and 0.3 hold one ``{"ended_at": step}`` per process (rank order; ``None``: not yet), which
            a resume on as many processes still honours.
        library: for a stream whose library continues a position itself (mosaicml-streaming), that
            library's own state as it saves it, once ``consumed`` samples of the epoch are gone; else ``None``.
    """

    sharding: ShardingInfo
    position: Position
    consumed: int
    world_size: int | None = None
    streams: list[dict[str, Any]] | None = None
    library: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The state as plain data, with its format and version."""
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            **asdict(self.sharding),
            **{key: getattr(self.position, name) for name, key in _POSITION_SAVED.items()},
            **{
                name: getattr(self, name)
                for name in _OWN_SAVED
                if name not in _WRITTEN_WHEN_SET or getattr(self, name) is not None
            },
        }

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
                f"the epoch afresh{_WITHOUT_STATE}."
            )
        missing = [name for name in _KEYS if name not in state and name not in _OPTIONAL]
        if missing:
            raise ValueError(
                f"`state_dict` is missing the keys {missing}; it is truncated or was edited. "
                "Pass the complete dict returned by the loader's `state_dict()`."
            )
        values: dict[str, Any] = {name: state.get(name, _OPTIONAL.get(name)) for name in _KEYS}
        _check_values(values)
        sharding = ShardingInfo(**{name: values[name] for name in _SHARDING_SAVED})
        position = Position(**{name: values[key] for name, key in _POSITION_SAVED.items()})
        return cls(sharding, position, **{name: values[name] for name in _OWN_SAVED})


# NOTE: the saved keys come from the fields, so a field added to `ShardingInfo`, `Position` or `LoaderState`
# is saved and read back (give it a default in `_OPTIONAL`: states written before it lack it).
_SHARDING_SAVED = tuple(field.name for field in fields(ShardingInfo))
_POSITION_SAVED = {
    field.name: _POSITION_RENAMED.get(field.name, field.name)
    for field in fields(Position)
    if field.name not in _POSITION_UNSAVED
}
"""Each saved ``Position`` field and its key."""
_OWN_SAVED = tuple(field.name for field in fields(LoaderState) if field.name not in ("sharding", "position"))
_KEYS = (*_SHARDING_SAVED, *_POSITION_SAVED.values(), *_OWN_SAVED)
"""The saved keys, in the order they are written (after ``format`` and ``version``)."""


def check_resumable(state: Any, here: ShardingInfo, library: SelfSplit | None = None) -> LoaderState:
    """Parse ``state`` and refuse it (``ValueError``) if a loader sharding as ``here`` cannot continue it
    exactly; ``library``: how a stream that splits itself does it (it may continue a position itself)."""
    saved = LoaderState.from_dict(state)  # NOTE: refuses another format or version, then each bad value.
    there, at = saved.sharding, saved.position
    mid_epoch, resharded = at.steps > 0, there.num_processes != here.num_processes
    shares = there.shares or here.shares
    for name in ("mode", "dataset_length", "batch_size", "split_batches", "drop_last"):
        _refuse_other_setting(name, getattr(there, name), getattr(here, name))
    if mid_epoch and not shares and there.sampler is not None:
        _refuse_other_setting("sampler", there.sampler, here.sampler)
    handed = library is not None and library.resumes_itself and saved.library is not None
    # NOTE: shares read on another number of processes first: one process reads a natively shardable
    # stream strided, so the kinds differ too, but the number of processes is why.
    if mid_epoch and there.shares and resharded and not handed:
        raise ValueError(_other_shares(there.num_processes, here.num_processes, library))
    if mid_epoch and shares and there.sampler != here.sampler:
        if library is not None and not there.shares:
            raise ValueError(_NOW_RECOGNISED.format(saved=there.sampler, reason=library.reason))
        raise ValueError(_OTHER_STREAM_SHARDING.format(saved=there.sampler, here=here.sampler))
    if resharded and there.streamed and not there.shares and at.read_before_resume and at.workers:
        raise ValueError(_SECOND_REPLAY.format(epoch=at.epoch, workers=at.workers, n=there.num_processes))
    return saved


def _refuse_other_setting(name: str, there: Any, here: Any) -> None:
    if there != here:
        raise ValueError(
            f"`state_dict` was saved with `{_setting(name, there, here)}`, but this loader has "
            f"`{_setting(name, here, there)}`. Load it into a loader built the same way (same dataset, "
            f"batch size, sampler and flags), or start the epoch afresh"
            f"{_BETWEEN_EPOCHS if name == 'sampler' else _WITHOUT_STATE}."
        )


# NOTE: a state saved between epochs continues under another sampler (mid-epoch only is refused), not under
# another dataset length, batch size, flag or version.
_BETWEEN_EPOCHS = (
    " (under Lightning: `trainer.fit(ckpt_path=...)` with a checkpoint written between epochs, such as the "
    "`epoch=E-step=S.ckpt` that `ModelCheckpoint` writes at an epoch's end)"
)
_WITHOUT_STATE = (
    " (under Lightning, whose checkpoints hold this state: `trainer.fit` without `ckpt_path`, the weights "
    "loaded with `LightningModule.load_from_checkpoint`)"
)
_SAMPLER_OPTIONS = {
    "SeedableRandomSampler": "use_seedable_sampler",
    "ScalableRandomSampler": "scalable_shuffle",
}


def _setting(name: str, value: Any, other: Any) -> str:
    """``name=value`` as the user set it: the option behind a saved ``mode`` or sampler class."""
    if name == "mode":
        return f"dispatch_batches={value == 'dispatch'}"
    if name == "sampler" and value in _SAMPLER_OPTIONS:
        return f"{_SAMPLER_OPTIONS[value]}=True"
    if name == "sampler" and value == "RandomSampler" and other in _SAMPLER_OPTIONS:
        return f"{_SAMPLER_OPTIONS[other]}=False"
    return f"{name}={value!r}"


_OTHER_STREAM_SHARDING = (
    "`state_dict` was saved mid-epoch from a stream sharded as {saved!r}, but this loader shards it "
    "as {here!r} (`iterable_sharding` or the dataset changed). Build the loader as it was, or load a "
    "state saved between epochs."
)

_NOW_RECOGNISED = (
    "`state_dict` was saved mid-epoch from a stream read as {saved!r} (every process read the whole stream and "
    "kept its slice), by a release that did not recognise that this dataset splits itself by rank; this "
    "release does ({reason}) and reads each process's own part, so the position has no counterpart: the "
    "release changed how this dataset is read, not your loader. Resume from a checkpoint saved between "
    "epochs (it loads), or finish this epoch with the release that saved it."
)

# NOTE: the first change of process count replays the epoch's order as its workers read it
# (`loaders/strided_source.py`); the state of the replayed epoch records where that replay stands, not how a
# second one would continue.
_SECOND_REPLAY = (
    "`state_dict` was saved in epoch {epoch} of a stream read by {workers} DataLoader workers, after that "
    "epoch had already moved to another number of processes; it moves once per epoch. Resume on {n} "
    "processes (as saved) to finish epoch {epoch}, or resume from a checkpoint written before the first "
    "move or after the epoch."
)


def _other_shares(saved: int, now: int, library: SelfSplit | None) -> str:
    reason = SHARES_STAY if library is None else library.other_count(saved, now)
    return (
        f"`state_dict` was saved mid-epoch by {saved} processes, each reading its own share of the stream, "
        f"but this run has {now}: {reason}. Resume this epoch on {saved} processes, or load a state saved "
        "between epochs (it loads on any number)."
    )


def _valid_stream(entry: Any) -> bool:
    if not isinstance(entry, dict) or set(entry) != {"ended_at"}:
        return False
    return entry["ended_at"] is None or _is_int(entry["ended_at"], least=0)


def _is_int(value: Any, least: int | None = None) -> bool:
    """Whether ``value`` is an ``int`` (not a ``bool``), of at least ``least`` if given."""
    return isinstance(value, int) and not isinstance(value, bool) and (least is None or value >= least)


_COUNTS = ("epoch", "steps", "base", "consumed", "base_steps", "num_workers", "batch_size", "dataset_length")
_NULLABLE = {"batch_size", "dataset_length", *(key for key, default in _OPTIONAL.items() if default is None)}
"""The keys whose value may be ``None``: a size not known, and the optional keys that default to it."""
_VALID: dict[str, Callable[[Any], bool]] = {
    **dict.fromkeys(_COUNTS, lambda value: _is_int(value, least=0)),
    **dict.fromkeys(("num_processes", "world_size"), lambda value: _is_int(value, least=1)),
    **dict.fromkeys(("split_batches", "drop_last"), lambda value: isinstance(value, bool)),
    "even_batches": lambda value: isinstance(value, bool) or value == "balanced",
    "mode": lambda value: value in get_args(Mode),
    "sampler_seed": _is_int,
    "streams": lambda value: isinstance(value, list) and all(_valid_stream(entry) for entry in value),
    "library": lambda value: isinstance(value, dict),
}
"""What each key's value must be when it is not ``None`` (any other key: a string)."""


def _check_values(values: dict[str, Any]) -> None:
    """Refuse an edited state now, rather than a confusing failure at the next ``iter()``: the first value a
    loader never writes (then ``base_steps`` above ``steps``)."""
    bad = next((name for name, value in values.items() if not _valid(name, value)), None)
    if bad is None and values["base_steps"] > values["steps"]:
        bad = "base_steps"
    if bad is not None:
        raise ValueError(
            f"`state_dict[{bad!r}]` is {values[bad]!r}, which a loader never writes; the state was edited or "
            "corrupted. Pass the dict returned by the loader's `state_dict()` unchanged."
        )


def _valid(name: str, value: Any) -> bool:
    if value is None:
        return name in _NULLABLE
    return _VALID.get(name, lambda value: isinstance(value, str))(value)


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
    return torch.frombuffer(bytearray(base64.b64decode(encoded)), dtype=torch.uint8).clone()
