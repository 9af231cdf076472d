"""What kind of data a loader holds: the one value ``loaders/kinds.py`` decides and everything after reads
(docs/DESIGN.md, "Kinds of data")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

from lightning_shard.loaders.streams import StreamEnds

if TYPE_CHECKING:
    from lightning_shard.sampling.self_split import SelfSplit
    from lightning_shard.sampling.torchdata_nodes import NodesGraph

Source: TypeAlias = Literal["map", "strided", "shares", "plain"]
"""Who reads what: a map-style dataset by index, a stream every process strides, a stream each process reads
its own share of, or one the loader does not shard (a ``DataLoaderShard`` built over a plain iterable)."""
IndexShape: TypeAlias = Literal["batches", "sampler", "samples", "none"]
"""Where a map-style loader's index source goes: ``batch_sampler``, ``sampler`` (a batch sampler passed as
``sampler``), single samples (``batch_size=None``), or none (a stream)."""


@dataclass(frozen=True)
class DataKind:
    """What kind of data a loader holds, decided once by ``classify``.

    Attributes:
        source: who reads what (``Source``).
        dispatch: whether process 0 loads and sends every process its slice.
        index_shape: where a map-style loader's index source goes (``IndexShape``).
        state_name: what a stream's saved state records as its ``sampler`` (``None``: map-style data).
        reason: why the data is split so (the plan line, the fallback warning).
        library: how a stream that splits itself by rank does it.
        stream_ends: what a stream's processes do when their streams end at different steps.
        fingerprinted: whether a strided stream's processes check they read the same stream.
        workers_shard: whether a stream's ``DataLoader`` workers split what a process reads with ``shard()``.
        pipeline: the torchdata.nodes graph that makes each step's batch of the root items read (``None``: the
            ``DataLoader`` makes it).
    """

    source: Source
    dispatch: bool = False
    index_shape: IndexShape = "none"
    state_name: str | None = None
    reason: str = ""
    library: SelfSplit | None = None
    stream_ends: StreamEnds | None = None
    fingerprinted: bool = False
    workers_shard: bool = False
    pipeline: NodesGraph | None = None

    @property
    def stream(self) -> bool:
        """Whether the data is an iterable dataset."""
        return self.source != "map"


@dataclass(frozen=True)
class LeftAsItIs:
    """A training iterable that is not a ``DataLoader`` and that the strategies leave as it is.

    Attributes:
        name: its type's name.
        reason: why it is left (the plan line: "left as it is: `Batches` (reason)").
        checked: whether its processes compare a digest of their first batch (a declaration turns it off).
    """

    name: str
    reason: str
    checked: bool

    def describe(self) -> str:
        """For the plan line: "`Batches` (why)"."""
        return f"`{self.name}` ({self.reason})"
