"""What kind of data a loader holds: the one value ``loaders/kinds.py`` decides and everything after reads
(docs/DESIGN.md, "Kinds of data"), with the ``stream_ends`` policies it carries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

if TYPE_CHECKING:
    from lightning_shard.sampling.native_stream import StreamKind
    from lightning_shard.sampling.self_split import SelfSplit
    from lightning_shard.sampling.torchdata_nodes import NodesGraph

Source: TypeAlias = Literal["map", "strided", "shares", "plain"]
"""Who reads what: a map-style dataset by index, a stream every process strides, a stream each process reads
its own share of, or one the loader does not shard (a ``DataLoaderShard`` built over a plain iterable)."""
IndexShape: TypeAlias = Literal["batches", "sampler", "samples", "none"]
"""Where a map-style loader's index source goes: ``batch_sampler``, ``sampler`` (a batch sampler passed as
``sampler``), single samples (``batch_size=None``), or none (a stream, or a loader built without one)."""

StreamEnds: TypeAlias = Literal["pad", "shortest", "own", "same"]
"""What a loader over a stream does when its processes' streams may end at different steps: ``"same"`` (all
end together, or all raise), ``"pad"`` (ended shares restart until all ended), ``"shortest"`` (all stop at
the first end, rank 0 reports what is left unseen) or ``"own"`` (predict: no agreement)."""
PAD: Final = "pad"
SHORTEST: Final = "shortest"
OWN: Final = "own"
SAME: Final = "same"


def stream_ends_for(strided: bool, even_batches: bool, uneven: StreamEnds = SHORTEST) -> StreamEnds:
    """The ``stream_ends`` policy of a stream, decided here only: with ``even_batches`` ``"same"`` (strided) or
    ``"pad"`` (a share of its own), else ``uneven`` (``"own"`` where no step is collective: predict)."""
    if not even_batches:
        return uneven
    return SAME if strided else PAD


_ENDS_TEXT = {
    PAD: "uneven ends padded by restarting the shorter shares (padded samples counted at each epoch's end)",
    SHORTEST: "all stop at the shortest stream (samples left unseen reported at each epoch's end)",
    OWN: "each process reads its part to its end",
}


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
    state_name: StreamKind | None = None
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

    @property
    def indexed(self) -> bool:
        """Whether the loader reads its batches by index, through an ``EpochCursor`` (map-style data with an
        index source): a start is then index arithmetic, not batches read and dropped."""
        return self.index_shape != "none"

    def describe(self) -> str | None:
        """How a stream each process reads is split, why, and what its processes do at uneven ends, for the
        plan line (``None``: map-style data, a dispatched stream or one left unsharded)."""
        if self.dispatch or self.source not in ("strided", "shares"):
            return None
        why = f" ({self.reason})" if self.reason else ""
        if self.source == "strided":
            how = f"strided, every process reads the whole stream{why}"
        elif self.library is None:
            how = f"native, each process reads only its share{why}"
        else:
            how = f"split by rank by the dataset itself (passed through), as it {self.library.reason}"
        ends = _ENDS_TEXT.get(self.stream_ends or SAME)
        return f"{how}; {ends}" if ends else how


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
