"""Plain data shared by the loaders, their saved state and the code that drives them: what kind of data a
loader holds (``DataKind``, the one value ``loaders/kinds.py`` decides and everything after reads; docs/DESIGN.md,
"Kinds of data"), with the ``stream_ends`` policies it carries; where a loader stands in its epoch, what it
shards, and what a training loop tells it it consumed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeAlias, runtime_checkable

from lightning_shard.sampling.balance import EvenBatches, is_balanced
from lightning_shard.sampling.native_stream import NATIVE_STREAM_KINDS, STREAM_KINDS

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
    return (SAME if strided else PAD) if even_batches else uneven


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
    def sharded_stream(self) -> bool:
        """Whether the loader's dataset is this process's part of the user's stream (a stride or a share), which
        holds the user's dataset as its ``dataset``."""
        return self.source in ("strided", "shares")

    @property
    def indexed(self) -> bool:
        """Whether the loader reads its batches by index, through an ``EpochCursor`` (map-style data with an
        index source): a start is then index arithmetic, not batches read and dropped."""
        return self.index_shape != "none"

    def describe(self) -> str | None:
        """How a stream each process reads is split, why, and what its processes do at uneven ends, for the
        plan line (``None``: map-style data, a dispatched stream or one left unsharded)."""
        if self.dispatch or not self.sharded_stream:
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
        stateful: whether it has ``state_dict`` / ``load_state_dict`` (Lightning then saves its state).
    """

    name: str
    reason: str
    checked: bool
    stateful: bool = False

    def describe(self) -> str:
        """For the plan line: "`Batches` (why)"."""
        return f"`{self.name}` ({self.reason})"


Mode = Literal["shard", "dispatch"]
"""How a loader shards: each process loads its own batches, or process 0 loads and sends slices."""


@dataclass(frozen=True)
class Position:
    """Where an epoch stands (a restore, an iteration's start, what a state saves; the live counters are a
    ``Progress``): of its ``steps``, the first ``steps_before_resume`` were taken under the sharding the epoch was
    resumed from, which read ``read_before_resume`` (counted in the sharding's ``ShardingInfo.read_unit``: batches
    of the user's loader, or a stream's elements); this process continues at its ``start``. Saved as ``base`` and
    ``base_steps`` (``loaders/state.py``)."""

    epoch: int | None = 0
    """The epoch; ``None`` in a restore that applies to whatever epoch the loader is at then."""
    steps: int = 0
    read_before_resume: int = 0
    steps_before_resume: int = 0
    generator_state: str | None = None
    """The sampler's generator state at the start of the epoch (base64), if any."""
    sampler_seed: int | None = None
    workers: int | None = None
    """The ``DataLoader`` workers this epoch is read with when not the loader's own: a stream's epoch
    resumed under another ``num_workers`` finishes under the count it started with."""
    ended_at: tuple[int | None, ...] | None = None
    """Each process's share's end step (``None``: not yet), by rank, as a 0.2 / 0.3 state's ``streams`` recorded
    it (``None``: not recorded, or not a stream of shares)."""
    library: dict[str, Any] | None = None
    """In a restore only: a library's own state (``SelfSplit.restore``), handed to it when the epoch begins."""

    @property
    def start(self) -> int:
        """This process's batch number in the shard of what was left after ``read_before_resume``."""
        return self.steps - self.steps_before_resume


@dataclass(frozen=True)
class Standing:
    """Where an epoch stands, each count in its unit (``ResumableLoader.standing``, what the plan line and the
    audit read): steps are this process's, samples those of every process together."""

    epoch: int
    steps: int
    """Steps of the epoch, those taken before a resume included."""
    steps_before_resume: int
    """Of ``steps``, those taken under the sharding the epoch was resumed from."""
    samples: int
    """Samples consumed in the epoch (0 when batch sizes are unknown)."""
    samples_before_resume: int
    """Of ``samples``, those consumed under the sharding the epoch was resumed from."""


@dataclass(slots=True)
class Progress:
    """The live counters of a loader's epoch, moved by its ``Resumption`` only; slotted, and apart from the
    ``DataLoader`` (whose ``__setattr__`` is slow), as they change at every batch."""

    epoch: int = 0
    """The epoch the next (or current) iteration covers."""
    begun: Position | None = None
    """The start of the epoch being iterated (``None``: between epochs)."""
    steps: int = 0
    """Steps taken in the epoch being iterated, those before its start included."""
    end: bool = False
    """Whether the batch just yielded is the last of the epoch."""

    @property
    def in_epoch(self) -> bool:
        """Whether an epoch is being iterated."""
        return self.begun is not None

    def position(self) -> Position:
        """Where the epoch being iterated stands now."""
        assert self.begun is not None  # NOTE: asked only in an epoch (`in_epoch`)
        return replace(self.begun, epoch=self.epoch, steps=self.steps)


@dataclass(frozen=True)
class ShardingInfo:
    """The sharding a loader applies, as recorded in and checked against saved state."""

    mode: Mode
    num_processes: int
    split_batches: bool
    even_batches: EvenBatches
    drop_last: bool
    batch_size: int | None
    dataset_length: int | None
    sampler: str | None
    """The kind of index source: the index sampler's class name, ``"iterable"`` (a strided stream),
    ``"native-stream"`` or ``"self-split-stream"`` (``None`` in a state saved by 0.1)."""

    @property
    def streamed(self) -> bool:
        """Whether it shards a stream (read from the name the state records, ``DataKind.state_name``)."""
        return self.sampler in STREAM_KINDS

    @property
    def shares(self) -> bool:
        """Whether each process reads a share of its own (natively sharded, or split by the dataset itself)."""
        return self.sampler in NATIVE_STREAM_KINDS

    @property
    def read_unit(self) -> Literal["batches", "elements"]:
        """What ``Position.read_before_resume`` counts: a stream's elements where each process reads the stream
        itself, else batches of the user's loader."""
        return "elements" if self.mode == "shard" and self.streamed else "batches"

    @property
    def step_size(self) -> int:
        """Units of ``read_unit`` consumed per step by all processes together."""
        batches = 1 if self.split_batches else self.num_processes
        return batches * (self.batch_size or 1) if self.read_unit == "elements" else batches

    @property
    def total_batch_size(self) -> int:
        """Samples per step across all processes (``B * N``, or ``B`` with ``split_batches``; 0 unknown)."""
        return (self.batch_size or 0) * (1 if self.split_batches else self.num_processes)

    def samples_in(self, read: int) -> int:
        """Samples in ``read`` of ``read_unit`` (``Position.read_before_resume``, or a state's ``consumed``)."""
        return read * self.total_batch_size // self.step_size if self.step_size else 0

    def remainder(self, before: int = 0) -> int:
        """Real samples of the last (padded) global batch, or -1 when no batch is padded or it is unknown;
        ``before``: samples consumed before this sharding took over the epoch (an elastic resume)."""
        if self.drop_last or self.dataset_length is None or not self.total_batch_size:
            return -1
        if self.mode == "shard" and is_balanced(self.even_batches, self.dataset_length, self.num_processes):
            return -1
        return max(self.dataset_length - before, 0) % self.total_batch_size

    def pads(self, remainder: int) -> bool:
        """Whether an epoch whose last global batch has ``remainder`` samples repeats some to fill it."""
        if remainder <= 0 or self.num_processes == 1 or not self.even_batches:
            return False
        return self.mode == "shard" or remainder % self.num_processes != 0


@dataclass(frozen=True)
class Consumed:
    """How far the code iterating a loader really got in the current epoch."""

    steps: int
    """Steps consumed in the epoch (the loader may have yielded more: a read-ahead)."""
    epoch_finished: bool = False
    """Whether the consumer is done with the epoch; the state then starts the next epoch."""
    next_epoch: int | None = None
    """With ``epoch_finished``: the epoch that follows (default: the loader's epoch plus one)."""


@runtime_checkable
class ResumeHook(Protocol):
    """What a training loop tells its loader, set as ``loader.resume_hook``.

    Lightning reads batches ahead of its training step and stops an epoch after ``len(loader)`` batches
    without exhausting the loader, so what the loader *yielded* is not what training *consumed*; and
    Lightning keeps its own step counter beside the loader's state. The Lightning adapter sets one of
    these on every training loader it prepares (``lightning_shard.lightning.sharding``).
    """

    def consumed(self) -> Consumed | None:
        """What the consumer took of the current epoch; ``None`` when the loader's own count is right."""

    def resharded(self) -> None:
        """Called after ``load_state_dict`` loaded a state written by another number of processes."""
