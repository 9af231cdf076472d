"""The combination matrix (docs/DESIGN.md, "Combination harness"): its axes, the rules that make a
combination invalid or refused, and a seeded generator of the cells to run.

A cell is one real fit: a strategy, a training loader, a mode, one Trainer feature, where the fit is
SIGKILLed and how it is restarted. ``tests/scripts/matrix_fit.py`` runs it three times (uninterrupted,
killed, restarted) and ``tests/matrix/check.py`` compares the sample ids each rank consumed.

Every single axis is tested on its own elsewhere; the defects this matrix exists for are combinations of
two. The full matrix (``make test-matrix``) therefore covers every pair of axis values that a valid cell
can hold (a greedy all-pairs design, seeded); ``make test`` runs a seeded sample of it.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields, replace
from itertools import combinations

AXES: dict[str, tuple[object, ...]] = {
    "strategy": ("ddp", "model_parallel", "fabric"),
    "loader": (
        "shuffled",
        "seedable",
        "sequential",
        "strided",
        "worker_split",
        "masked",
        "native",
        "hf",
        "self_split",
        "webdataset",
        "mosaic",
        "subclass",
        "unbatched",
        "nodes",
    ),
    "sampler": ("default", "bucketing", "max_tokens", "weighted", "weighted_gen", "filtering", "global_rng"),
    "workers": (0, 2),
    "mode": ("shard", "split", "dispatch"),
    "even": (True, False),
    "feature": (
        "none",
        "accumulate",
        "limit",
        "val_float",
        "reload",
        "combined",
        "onecycle",
        "onecycle_lightning",
        "early_exit",
    ),
    "interrupt": ("step", "validation", "epoch_end"),
    "devices": (2, 3),
    "restart": ("same", "fewer", "more"),
    "restart_workers": ("same", "other"),
}
"""Every axis and its values. ``loader``: map-style shuffled / seedable (``use_seedable_sampler``) /
sequential; a stream strided over the processes; one split among ``DataLoader`` workers by the dataset, and
the same with a random integer drawn from torch's generator in each element (``masked``: compared by
whole contents, which the package makes alike on every process);
one sharded natively (``n_shards`` / ``shard()``); a Hugging Face ``datasets`` stream; one that splits
itself by rank (``splits_by_rank``); a webdataset pipeline split by ``split_by_node`` and a mosaicml-streaming
``StreamingDataset`` (real libraries, on local files); a user's ``DataLoader`` subclass; ``batch_size=None``;
a torchdata.nodes ``Loader`` rooted in a ``SamplerWrapper`` over a ``RandomSampler`` (``workers``: its
``ParallelMapper``'s threads; ``tests/scripts/matrix_fit.py``, ``node_graph``). ``feature``:
one Trainer feature (``onecycle`` sizes a ``OneCycleLR`` from ``trainer.strategy.estimated_scheduler_steps``,
``onecycle_lightning`` from ``trainer.estimated_stepping_batches``; ``early_exit`` leaves every epoch
after ``EXIT_AFTER`` batches, by ``on_train_batch_start`` returning -1 or, in Fabric, ``break``).
``restart``: on the same number of processes, one fewer, one more (3 at most: the machines have 2 cores).
``sampler``: the user's own (``tests/scripts/matrix_fit.py``) in a map-style loader with a batch size,
or ``default`` (the loader's, as the ``loader`` value says): ``bucketing``, a ``BatchSampler`` subclass with
``batch_size`` whose buckets (``bucket_of``) end in short batches mid-epoch, its batches in an order drawn
from its ``RandomSampler``'s generator; ``max_tokens``, a batch sampler without ``batch_size`` filling each
batch up to ``MAX_TOKENS`` (``token_length``), in an order drawn from ``(SAMPLER_SEED, epoch)``;
``weighted`` / ``weighted_gen``, ``WeightedRandomSampler(weights, n, replacement=True)`` without / with a
``torch.Generator``; ``filtering``, a ``RandomSampler`` subclass (no generator) yielding the even ids only;
``global_rng``, a ``Sampler`` whose ``__iter__`` is ``torch.randperm(n)`` (the global random state)."""

LENGTH = 38
"""Samples of every map-style dataset and strided stream: an epoch ends with a padded global batch."""
EVEN_LENGTH = 36
"""The same with ``even_batches=False``: 12 batches, as many per process on 1, 2 and 3 processes (with
38, training would be uneven, which is refused at set-up: ``tests/lightning/test_reliability.py``)."""
SHARDS = (6, 6, 6, 6, 6, 6)
"""The pieces of the sharded streams (36 ids): equal shares on 1, 2 and 3 processes."""
BATCH = 3
"""Samples per process and step (``split``: the loader's batch is ``BATCH * 2``, split by 1, 2 or 3)."""
EPOCHS = 2
LIMIT, EXIT_AFTER = 4, 3
"""``limit_train_batches`` and the batch after which ``early_exit`` leaves an epoch."""

SAMPLER_SEED = 5
"""The seed of the user's samplers' own generators (``bucketing``'s, ``weighted_gen``'s; ``max_tokens``
adds the epoch)."""
BUCKETS = (7, 3, 5)
"""``bucketing``: id ``i`` is in bucket 0 when ``i % 7 < 3``, 1 when ``< 5``, else 2: 18 / 10 / 10 ids of 38,
16 / 10 / 10 of 36, so every bucket but one ends in a short batch (size 1 of ``BATCH``, 4 of ``split``'s
``BATCH * 2``: at least as many samples as processes, see ``split_short``), and an epoch has 14 batches
(7 with ``split``)."""
MAX_TOKENS = 9
"""``max_tokens``: a batch holds ids of one ``token_length`` (2, 3 or 4) up to 9 tokens: 4, 3 or 2 ids."""
REPLACEMENT = ("weighted", "weighted_gen")
"""Samplers that draw with replacement: no "exactly once"; compared with the uninterrupted run's draws."""
SAMPLER_LOADERS = ("shuffled", "seedable", "subclass")
"""The loaders a user's sampler goes in: ``DataLoader(dataset, batch_size, sampler=...)`` (or
``batch_sampler=...``), with ``use_seedable_sampler`` (``seedable``), or a user's ``DataLoader`` subclass."""

MAP_STYLE = ("shuffled", "seedable", "sequential", "subclass", "unbatched", "nodes")
STREAMS = ("strided", "worker_split", "masked", "native", "hf", "self_split", "webdataset", "mosaic")
UNSIZED = ("worker_split", "masked", "native", "hf", "self_split", "webdataset", "mosaic")
"""Streams without ``len()`` (a natively sharded loader has none: its processes' shares differ)."""
SHARES = ("native", "hf", "self_split", "webdataset", "mosaic")
"""Streams read as per-process shares (whole pieces, or the dataset's own split by rank): every id of
``SHARDS`` once an epoch."""
SHARED_STREAMS = ("native", "hf", "self_split", "webdataset")
"""Shares whose mid-epoch state does not carry to another N (mosaicml-streaming's own state does)."""
SPLITS_ITSELF = {
    "self_split": "declares `splits_by_rank = True`",
    "webdataset": "is a webdataset",
    "mosaic": "is a mosaicml-streaming",
}
"""The streams that split themselves by rank, and how the refusal to dispatch one names it."""
TRAINER_ONLY = ("accumulate", "limit", "val_float", "reload", "combined", "onecycle", "onecycle_lightning")
PARTIAL_EPOCH = ("limit", "early_exit")
SHUFFLED = ("shuffled", "seedable", "subclass", "unbatched", "nodes")


@dataclass(frozen=True)
class Cell:
    """One combination; ``id`` names it and ``Cell.parse`` reads it back (``MATRIX_CELLS``)."""

    strategy: str = "ddp"
    loader: str = "shuffled"
    sampler: str = "default"
    workers: int = 0
    mode: str = "shard"
    even: bool = True
    feature: str = "none"
    interrupt: str = "step"
    devices: int = 2
    restart: str = "same"
    restart_workers: str = "same"
    kill_at: int = 3
    """The kill comes after this many training batches (``step``), in the first validation after them
    (``validation``) or at the end of the epoch holding them (``epoch_end``)."""
    victim: int = 0

    @property
    def id(self) -> str:
        return "-".join(f"{field.name}={_text(getattr(self, field.name))}" for field in fields(self))

    @classmethod
    def parse(cls, text: str) -> Cell:
        """The cell ``text`` (an ``id``) names.

        Raises:
            ValueError: on an unknown axis or value.
        """
        values: dict[str, object] = {}
        types = {field.name: field.type for field in fields(cls)}
        for part in text.strip().split("-"):
            name, _, value = part.partition("=")
            if name not in types:
                raise ValueError(
                    f"`MATRIX_CELLS` names an unknown axis {name!r} in {text!r}; axes: {sorted(types)}."
                )
            values[name] = _value(value, str(types[name]))
        return cls(**values)  # type: ignore[arg-type]

    @property
    def restart_devices(self) -> int:
        return self.devices + {"same": 0, "fewer": -1, "more": 1}[self.restart]

    @property
    def restart_num_workers(self) -> int:
        return self.workers if self.restart_workers == "same" else 2 - self.workers

    @property
    def full_key(self) -> str:
        """What the uninterrupted run depends on: cells that differ only in the interruption share it."""
        validates = (
            "validation" if self.interrupt == "validation" else "step"
        )  # NOTE: it adds a validation loader
        return replace(
            self, interrupt=validates, restart="same", restart_workers="same", kill_at=0, victim=0
        ).id

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _text(value: object) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def _value(text: str, kind: str) -> object:
    if kind == "int":
        return int(text)
    if kind == "bool":
        return text in ("1", "True", "true")
    return text


# -- rules ------------------------------------------------------------------------------------------------
def invalid(cell: Cell) -> str | None:
    """Why ``cell`` is no combination a user can write (never run), or ``None``."""
    if cell.strategy == "fabric" and cell.feature in TRAINER_ONLY:
        return "a Trainer feature in a Fabric loop"
    if cell.strategy == "fabric" and cell.interrupt == "validation":
        return "the Fabric loop has no validation"
    if cell.strategy == "fabric" and cell.loader == "nodes":
        return "Fabric's `setup_dataloaders` takes `DataLoader`s only"
    if cell.restart_devices not in (1, 2, 3):
        return "at most 3 processes on 2 cores"
    if cell.loader == "strided" and (cell.workers or cell.restart_num_workers):
        return (
            "a stream that does not split among workers is read whole by each (torch's documented behaviour)"
        )
    if cell.feature == "combined" and cell.loader not in MAP_STYLE[:3]:
        return "CombinedLoader cells pair two map-style loaders"
    if cell.loader == "unbatched" and cell.mode == "split":
        return "`batch_size=None` has no batch to split"
    if cell.strategy == "model_parallel" and cell.mode == "dispatch" and cell.loader in STREAMS:
        return "kept small: ModelParallel launches cost a start-up each"
    if cell.interrupt == "validation" and cell.feature == "early_exit":
        return "no validation follows an epoch left by `on_train_batch_start` returning -1"
    if (
        cell.strategy == "fabric"
        and not cell.even
        and (cell.restart != "same" or (cell.loader in MAP_STYLE and _uneven(cell, cell.devices)))
    ):
        return (
            "a Fabric loop stepping unevenly under `even_batches=False` (warned about at set-up, not refused: "
            "Fabric does not say which loader trains; the rest of an epoch resumed on another count can split "
            "unevenly)"
        )
    if cell.sampler != "default" and cell.loader not in SAMPLER_LOADERS:
        return (
            "a sampler of the user's own goes in a map-style loader with a batch size (with it, `sequential` "
            "would be the same loader as `shuffled`)"
        )
    return None


def refusal(cell: Cell) -> str | None:
    """The message (a fragment) the cell must be refused with at set-up, or ``None`` when it must run.

    The rules are the README's ("Resuming on something else", "Streaming data", "Lightning"): each names
    why the combination cannot be exact, and the harness checks that every process raised it before
    its first step, never a hang or a silent loss.
    """
    if cell.sampler == "max_tokens" and cell.mode == "split":
        return "`split_batches=True` needs the batch size of the"  # NOTE: its batches have no one size
    if cell.loader == "unbatched" and cell.mode == "dispatch":
        return "`dispatch_batches=True` with `DataLoader(batch_size=None)`"
    if cell.loader == "nodes" and cell.mode == "dispatch":
        return "`dispatch_batches=True` with the torchdata.nodes graph"
    if (
        cell.loader in SPLITS_ITSELF
        and cell.mode == "dispatch"
        and max(cell.devices, cell.restart_devices) > 1
    ):
        return f"`dispatch_batches=True` over a dataset that {SPLITS_ITSELF[cell.loader]}"
    if not cell.even and cell.mode == "dispatch" and cell.loader in UNSIZED and cell.strategy != "fabric":
        return "`even_batches=False` with `dispatch_batches=True` over a stream without a length"
    if not cell.even and cell.loader in MAP_STYLE and _uneven(cell, cell.devices):
        return "`even_batches=False`"
    if cell.feature == "val_float" and cell.loader in UNSIZED:
        return "`Trainer(val_check_interval)` must be time based"  # Lightning's own refusal
    if not cell.even and cell.loader in MAP_STYLE and _uneven(cell, cell.restart_devices):
        return "`even_batches=False`"
    return None


def refusal_at_restart(cell: Cell, done: int) -> str | None:
    """The message the restart must be refused with at set-up when each process had consumed ``done``
    batches of the resumed epoch at the checkpoint (0: there was none), or ``None``.

    A stream's shares saved mid-epoch do not carry to another number of processes. ``even_batches=False``:
    the library checks the processes' lengths again once the checkpoint's state is loaded, and the rest of
    an epoch can split unevenly among another number of processes even when the whole epoch does not (12
    batches, 2 steps on 2 processes: 8 left, 3 / 3 / 2 on 3). Only what the library checks: whole batches
    under a Trainer (``split`` gives every process a part of every batch; a Fabric loop is not checked). A
    checkpoint on the last step of Lightning's epoch resumes the next epoch whole (``refusal``).
    """
    if cell.restart == "same" or done == 0:
        return None
    if cell.loader in SHARED_STREAMS and cell.mode != "dispatch" and not checkpoint_at_epoch_end(cell):
        return "each reading its own share of the stream"
    if cell.even or cell.loader not in MAP_STYLE or cell.mode == "split":
        return None
    if cell.strategy == "fabric" or cell.feature == "combined":
        return None
    total = len(epoch_batch_sizes(cell))
    steps = {"limit": LIMIT, "early_exit": EXIT_AFTER}.get(cell.feature, total)
    if done >= min(steps, -(-total // cell.devices)):
        return None
    rest = total - done * cell.devices
    return "`even_batches=False`" if rest % cell.restart_devices else None


def length(cell: Cell) -> int:
    """The samples of ``cell``'s map-style dataset or strided stream."""
    return LENGTH if cell.even else EVEN_LENGTH


def bucket_of(index: int) -> int:
    """The bucket of id ``index`` under the ``bucketing`` sampler (``BUCKETS``)."""
    modulus, first, second = BUCKETS
    rest = index % modulus
    return 0 if rest < first else 1 if rest < second else 2


def token_length(index: int) -> int:
    """The tokens of id ``index`` under the ``max_tokens`` sampler: 2, 3 or 4."""
    return 2 + index % 3


def loader_batch(cell: Cell) -> int:
    """The ``batch_size`` of ``cell``'s training loader (or its batch sampler's): split by the processes
    with ``split``."""
    return BATCH * 2 if cell.mode == "split" else BATCH


def sampled_ids(cell: Cell) -> list[int]:
    """The ids the sampler yields in an epoch, in id order (``filtering``: the even ones; with replacement,
    as many draws as ids)."""
    ids = list(range(length(cell)))
    return ids[::2] if cell.sampler == "filtering" else ids


def epoch_batch_sizes(cell: Cell) -> list[int]:
    """The sizes of the batches of one epoch of ``cell``'s map-style training loader, in no given order
    (the order is drawn; the sizes are not)."""
    if cell.loader == "unbatched":
        return [1] * length(cell)
    if cell.sampler in ("bucketing", "max_tokens"):
        groups: dict[int, int] = {}
        for index in sampled_ids(cell):
            key = bucket_of(index) if cell.sampler == "bucketing" else token_length(index)
            groups[key] = groups.get(key, 0) + 1
        sizes = []
        for key, count in sorted(groups.items()):
            size = loader_batch(cell) if cell.sampler == "bucketing" else MAX_TOKENS // key
            sizes += [size] * (count // size) + ([count % size] if count % size else [])
        return sizes
    count, size = len(sampled_ids(cell)), loader_batch(cell)
    return [size] * (count // size) + ([count % size] if count % size else [])


def split_short(cell: Cell, devices: int) -> bool:
    """Whether ``split`` meets a batch before the epoch's last with fewer samples than ``devices``: the
    library raises at that batch on every rank (it cannot be split so that each process takes a step).
    A shorter batch that is not the last is split exactly (parts differing by at most one sample), under
    ``dispatch`` too (which joins ``N`` batches, so at least ``N`` samples). No cell of the matrix has one
    (``BUCKETS``); the loader tests cover that error (``batch_shard.BatchSamplerShard._iter_split``)."""
    if cell.mode != "split" or cell.sampler != "bucketing":
        return False
    return any(0 < size < devices for size in epoch_batch_sizes(cell) if size != loader_batch(cell))


def _uneven(cell: Cell, devices: int) -> bool:
    """Whether the training batches of an epoch do not divide among ``devices`` processes under
    ``even_batches=False`` (whole batches, one a process; ``split``: a part of every batch, and of a short
    last one as ``BatchSampler``'s batching cuts it, ``width`` rows a process, so the last processes may get
    none; a bucketing sampler's last batch is cut among every process)."""
    sizes = epoch_batch_sizes(cell)
    if cell.mode != "split":
        return len(sizes) % devices != 0
    width = loader_batch(cell) // devices
    return cell.sampler != "bucketing" and 0 < sizes[-1] <= width * (devices - 1)


def checkpoint_at_epoch_end(cell: Cell) -> bool:
    """Whether the killed run's newest checkpoint was written on the last training step Lightning takes in
    an epoch (a kill at the end of an epoch, or in the validation that follows it): the restart begins
    the next epoch, so no position inside an epoch is carried."""
    if cell.strategy == "fabric" and cell.feature == "early_exit":
        return False  # NOTE: a Fabric loop that breaks out saves inside the loop only (`matrix_fit._fabric_loop`)
    return cell.interrupt == "epoch_end" or (cell.interrupt == "validation" and cell.feature != "val_float")


def partial_epochs(cell: Cell) -> bool:
    """Whether an epoch is read only in part (so each sample at most once, not exactly once)."""
    return cell.feature in PARTIAL_EPOCH or (not cell.even and cell.loader in STREAMS)


# -- the generator ----------------------------------------------------------------------------------------
def _random_cell(rng: random.Random, **fixed: object) -> Cell:
    values = {name: fixed.get(name, rng.choice(choices)) for name, choices in AXES.items()}
    cell = Cell(**values)  # type: ignore[arg-type]
    return replace(cell, kill_at=rng.randint(2, 4), victim=rng.randrange(cell.devices))


Pair = tuple[tuple[str, object], tuple[str, object]]


def _pairs(cell: Cell) -> set[Pair]:
    return set(combinations([(name, getattr(cell, name)) for name in AXES], 2))


def _all_pairs() -> list[Pair]:
    values = [(name, value) for name, choices in AXES.items() for value in choices]
    return [(a, b) for a, b in combinations(values, 2) if a[0] != b[0]]


COST = {"model_parallel": 10.0}
"""What a cell of a strategy costs, relative to the others: ``ShardModelParallelStrategy`` has only
Lightning's script launcher, so each of its fits starts (and imports) every rank anew."""

REGRESSIONS = (
    Cell(feature="onecycle", kill_at=3, victim=1),
    Cell(strategy="model_parallel", feature="onecycle_lightning", kill_at=4),
    Cell(strategy="fabric", loader="seedable", feature="early_exit", kill_at=4),
    Cell(loader="worker_split", workers=2, restart="more", kill_at=3, victim=1),
    Cell(loader="subclass", kill_at=3),
    Cell(loader="unbatched", mode="dispatch", kill_at=3),
    Cell(interrupt="epoch_end", restart="fewer", kill_at=3),
    Cell(loader="self_split", mode="dispatch", kill_at=2),
    Cell(feature="early_exit", interrupt="epoch_end", kill_at=4),
    Cell(loader="native", workers=2, mode="dispatch", kill_at=3),
    Cell(loader="seedable", feature="reload", kill_at=3),
    Cell(feature="reload", restart_workers="other", kill_at=3),
    Cell(loader="native", restart="more", kill_at=3),
    Cell(strategy="fabric", loader="hf", workers=2, restart="fewer", devices=3, kill_at=3),
    Cell(loader="self_split", restart="fewer", kill_at=2, victim=1),
    Cell(
        strategy="fabric",
        loader="mosaic",
        feature="early_exit",
        interrupt="epoch_end",
        devices=3,
        restart="fewer",
        restart_workers="other",
        kill_at=2,
        victim=2,
    ),
)
"""Cells of the defects found so far (``tests/matrix/test_matrix.py``, ``KNOWN_DEFECTS``) and of the
refusal of a mid-epoch state of shares on another count, kept in the matrix whatever the pairs: a defect
is a combination the all-pairs design need not hold again, and a rule is checked only where a cell
reaches it."""


def matrix(seed: int = 0, candidates: int = 30, tries: int = 1000) -> list[Cell]:
    """Valid cells covering every pair of axis values some valid cell holds (greedy, seeded), then
    ``REGRESSIONS``.

    For each pair not yet covered, ``candidates`` valid cells holding it are drawn and the one covering
    the most uncovered pairs per unit of cost (``COST``) is kept; a pair that ``tries`` draws cannot put
    in a valid cell is one no valid cell holds.
    """
    rng = random.Random(seed)
    covered: set[Pair] = set()
    cells: list[Cell] = []
    for pair in _all_pairs():
        if pair in covered:
            continue
        drawn = _holding(rng, pair, candidates, tries)
        if drawn:
            best = max(drawn, key=lambda cell: len(_pairs(cell) - covered) / COST.get(cell.strategy, 1.0))
            covered |= _pairs(best)
            cells.append(best)
    return cells + [cell for cell in REGRESSIONS if cell not in cells]


def _holding(rng: random.Random, pair: Pair, count: int, tries: int) -> list[Cell]:
    """Up to ``count`` valid cells holding ``pair`` (of at most ``tries`` drawn)."""
    found: list[Cell] = []
    for _ in range(tries):
        cell = _random_cell(rng, **dict(pair))
        if invalid(cell) is None:
            found.append(cell)
            if len(found) == count:
                break
    return found


def sample(cells: list[Cell], seed: int, count: int, own_samplers: int = 0) -> list[Cell]:
    """``count`` cells of ``cells`` drawn with ``seed`` (the order of the matrix kept), at least
    ``own_samplers`` of them with a sampler of the user's own (``sampler`` not ``default``)."""
    rng = random.Random(seed)
    own = [index for index, cell in enumerate(cells) if cell.sampler != "default"]
    picked = set(rng.sample(own, min(own_samplers, count, len(own))))
    rest = [index for index in range(len(cells)) if index not in picked]
    picked |= set(rng.sample(rest, min(count - len(picked), len(rest))))
    return [cell for index, cell in enumerate(cells) if index in picked]


def shuffles(cell: Cell) -> bool:
    """Whether ``cell``'s training order is drawn anew each epoch (every user's sampler here draws it)."""
    return cell.loader in SHUFFLED or cell.sampler != "default"
