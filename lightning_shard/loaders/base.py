"""``ResumableLoader``: the public face both loaders share, each method delegating to the loader's
``Resumption`` (``loaders/resumable.py``) or its source of batches (``loaders/source.py``); its ``StatefulDataLoader``
variants; and how a user's ``DataLoader`` subclass survives preparation: the prepared loader is of our class and
the user's, with the user's attributes, its ``__init__`` not run again (docs/DESIGN.md, "Real loader
subclasses"), and what a loader keeps of the user's ``DataLoader`` settings (``loader_settings``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_shard.comm.topology import Topology
from lightning_shard.loaders.position import DataKind, Position, ResumeHook, ShardingInfo, Standing
from lightning_shard.loaders.resumable import Resumption
from lightning_shard.loaders.source import BatchSource, EpochCursor, IndexObserver, moving, piped
from lightning_shard.loaders.state import LoaderState
from lightning_shard.loaders.streams import StreamRun


class ResumableLoader(DataLoader):
    """The public face both loaders share, each method delegating to the loader's ``resumption``."""

    kind: DataKind
    """What kind of data the loader holds (``loaders/kinds.py``), decided once when it is built."""
    source: BatchSource
    """Where its batches come from, one class per kind (``loaders/source.py``)."""
    resumption: Resumption
    """Its epochs and position, over ``source``."""
    device: torch.device | None
    non_blocking: bool
    use_stateful_dataloader: bool
    topology: Topology | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register a class that is also a ``StatefulDataLoader`` as the stateful variant of its first base
        (the built-in ``Stateful*`` classes, and each ``stateful_loader_class`` makes; the first one stays)."""
        super().__init_subclass__(**kwargs)
        first = cls.__bases__[0]
        if issubclass(cls, StatefulDataLoader) and not issubclass(first, StatefulDataLoader):
            _STATEFUL_VARIANTS.setdefault(first, cls)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """``cls``, or its ``StatefulDataLoader`` variant when ``use_stateful_dataloader=True`` asks for it
        (the seed's contract; the pattern of ``pathlib.Path()``, docs/DESIGN.md, "Real loader subclasses")."""
        return super().__new__(stateful_loader_class(cls) if _asks_stateful(cls, args, kwargs) else cls)

    # -- iteration --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        """This process's batches of the epoch: the source's, from where the ``Resumption`` says the epoch
        begins (a pending restore applied), each counted by it (the one writer of the position); the batches of a
        torchdata.nodes graph (the kind's ``pipeline``) made by it from the root items the source reads."""
        batches = self.source.batches(self.resumption.begin_epoch())
        if self.kind.pipeline is not None:
            batches = piped(batches, self.kind.pipeline, moving(self))
        return self.resumption.run(batches)

    def user_batches(self, workers: int | None = None) -> Iterator[Any]:
        """A new iterator over the user's batches of this epoch, as the ``DataLoader`` (and a user's subclass
        of it) yields them; with ``workers`` other than the loader's own, read by a one-epoch ``DataLoader``
        with that many (a stream's epoch resumed under another ``num_workers`` finishes under its own).
        """
        if workers is None or workers == self.num_workers:
            return super().__iter__()
        settings = dict(loader_settings(self), num_workers=workers, persistent_workers=False)
        if workers == 0:
            settings.update(prefetch_factor=None, multiprocessing_context=None)
        return iter(
            DataLoader(self.dataset, batch_size=self.batch_size, drop_last=self.drop_last, **settings)
        )

    @property
    def stream(self) -> StreamRun | None:
        """The end agreement of a loader over a stream (and each process's position in a share of its own)."""
        return self.source.stream

    cursor: EpochCursor | None = None
    """The index source that makes map-style resumption arithmetic: the ``EpochCursor`` the loader's class made
    when it was built, where its kind put it (``None``: the kind reads no indices, as for iterable data)."""

    @property
    def sharding(self) -> ShardingInfo:
        """The sharding this loader applies (mode, processes, batch size, flags, dataset length)."""
        return self.source.sharding()

    @property
    def resume_hook(self) -> ResumeHook | None:
        """Set by a training loop that consumes less than the loader yielded (see ``ResumeHook``)."""
        return self.resumption.resume_hook

    @resume_hook.setter
    def resume_hook(self, hook: ResumeHook | None) -> None:
        self.resumption.resume_hook = hook

    @property
    def pending_position(self) -> Position | None:
        """The restore (``load_state_dict``, a skip) that the next ``iter()`` applies, if any."""
        return self.resumption.pending

    @property
    def end_of_dataloader(self) -> bool:
        """Whether the batch just yielded is the last of the epoch."""
        return self.resumption.progress.end

    @property
    def remainder(self) -> int:
        """Real samples of the last (padded) global batch, or -1 when no batch is padded or it is unknown."""
        return self.resumption.remainder

    @property
    def steps_taken(self) -> int:
        """Batches yielded in the epoch in progress, counting those skipped or taken before a restore."""
        progress = self.resumption.progress
        return progress.steps if progress.in_epoch else 0

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration covers."""
        return self.resumption.epoch

    @property
    def iteration(self) -> int:
        """The epoch counter under the reference's name (``epoch``), for code written against it."""
        return self.resumption.epoch

    @property
    def pads_last_step(self) -> bool:
        """Whether the epoch's last step repeats samples to fill every process's batch."""
        return self.sharding.pads(self.remainder)

    @property
    def total_batch_size(self) -> int:
        """Samples per step across all processes (``B * N``, or ``B`` with ``split_batches``; 0 unknown)."""
        return self.sharding.total_batch_size

    @property
    def total_dataset_length(self) -> int | None:
        """``len`` of the user's dataset across all processes, ``None`` when it has none."""
        return self.sharding.dataset_length

    def __len__(self) -> int:
        """Steps of the epoch in progress (or the next), counting those taken before a resume."""
        return self.resumption.length()

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch``; it reaches the sampler, the batch sampler and every wrapper in between.

        Selecting another epoch than the one being iterated abandons that one: the next ``iter()``,
        and ``state_dict()`` until then, start ``epoch`` from its beginning.
        """
        self.resumption.set_epoch(epoch)

    def state_dict(self, steps: int | None = None) -> dict[str, Any]:
        """The loader's position as plain data, the same on every process.

        Args:
            steps: steps consumed in this epoch, when the caller reads ahead of what it consumed;
                defaults to what the ``resume_hook`` reports, else to the batches this loader yielded.

        Raises:
            ValueError: if ``steps`` is below the steps taken before this run resumed the epoch.
        """
        return self.resumption.state_dict(steps)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue, at the next ``iter()``, exactly where the run that saved ``state_dict`` stopped.

        State saved by another number of processes continues with every sample that run did not
        consume, sharded over this one's; its steps keep counting, so ``len()`` is the steps taken
        plus the steps left.

        Raises:
            ValueError: if the state is malformed or from another version, dataset length, batch size
                or ``split_batches`` setting (``check_resumable``).
        """
        self.resumption.load_state_dict(state_dict)

    def fresh_copy(self) -> ResumableLoader:
        """A loader with every setting and the epoch of this one and a position of its own (at the epoch's start),
        with the user's attributes: the dataset is shared, what holds a position copied (``_copied_arguments``)."""
        dataset, arguments = self._copied_arguments()
        shared = {name: getattr(self, name) for name in _COPIED_SETTINGS}
        twin = type(self)(dataset, **shared, **arguments)
        carry_user_attributes(twin, self, getattr(self, "user_attributes", ()))
        twin.set_epoch(self.epoch)
        return twin

    def _copied_arguments(self) -> tuple[Any, dict[str, Any]]:
        """The dataset and the class's own constructor arguments of a ``fresh_copy`` (each class copies its
        index source, generators or shard)."""
        raise NotImplementedError

    def state_at(self, steps: int) -> LoaderState:
        """The loader's state once ``steps`` steps of the epoch in progress (or the next) are consumed.

        What ``state_dict(steps)`` writes, before it becomes plain data: the ``sharding``, and in
        ``consumed`` the batches every process consumed together, those before a resume included.

        Raises:
            ValueError: if ``steps`` is below the steps taken before this run resumed the epoch.
        """
        return self.resumption.state_at(self.resumption.snapshot(), steps)

    def standing(self, steps: int | None = None) -> Standing:
        """Where the epoch in progress (or a pending restore, or the next epoch) stands once ``steps`` of it are
        consumed (default: the steps taken): the one answer, in steps and samples."""
        state = self.resumption.state_at(self.resumption.snapshot(), steps)
        info, at = state.sharding, state.position
        return Standing(
            at.epoch or 0,
            at.steps,
            at.steps_before_resume,
            info.samples_in(state.consumed),
            info.samples_in(at.read_before_resume),
        )

    @property
    def index_observer(self) -> IndexObserver | None:
        """What wraps each iteration's batches of indices, as the loader's ``cursor`` yields them (``None``:
        nothing; always for iterable data). Set it before the ``iter()`` whose indices it should see."""
        cursor = self.cursor
        return None if cursor is None else cursor.observer

    @index_observer.setter
    def index_observer(self, observer: IndexObserver | None) -> None:
        cursor = self.cursor
        if cursor is None:
            raise ValueError(
                f"This loader's dataset ({type(self.dataset).__name__}) is iterable, so its batches have no "
                "indices to observe. Observe a loader over a map-style dataset (one with `__getitem__` and "
                "`__len__`); check `loader.cursor is not None` first."
            )
        cursor.observer = observer


_COPIED_SETTINGS = ("device", "use_stateful_dataloader", "non_blocking", "topology", "kind")
"""The constructor arguments both loaders keep under their own names, which a ``fresh_copy`` passes again."""

_STATEFUL_VARIANTS: dict[type, type] = {}
"""Each loader class's ``StatefulDataLoader`` variant, registered by ``ResumableLoader.__init_subclass__``."""


def stateful_loader_class(cls: type) -> type:
    """``cls`` combined with ``StatefulDataLoader`` (``cls`` itself when it already is one), one class per ``cls``;
    ours comes first in the class order, so the state stays the shard's.

    Raises:
        TypeError: if ``cls`` is not a ``DataLoaderShard`` or ``DataLoaderDispatcher`` (sub)class.
    """
    if not (isinstance(cls, type) and issubclass(cls, ResumableLoader)) or cls is ResumableLoader:
        raise TypeError(
            f"`stateful_loader_class` takes `DataLoaderShard`, `DataLoaderDispatcher` or a subclass, got "
            f"{cls!r}. Pass the loader class itself, e.g. `stateful_loader_class(MyShard)`."
        )
    if issubclass(cls, StatefulDataLoader):
        return cls
    if cls not in _STATEFUL_VARIANTS:
        type(f"Stateful{cls.__name__}", (cls, StatefulDataLoader), {"__module__": cls.__module__})
    return _STATEFUL_VARIANTS[cls]


def _asks_stateful(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a constructor call of ``cls`` passes ``use_stateful_dataloader=True`` (by name or position)."""
    passed = dict(zip(_positional_parameters(cls), args, strict=False), **kwargs)
    return bool(passed.get("use_stateful_dataloader", False))


@functools.cache
def _positional_parameters(cls: type) -> tuple[str, ...]:
    """The names of the parameters of ``cls.__init__`` that an argument passed by position fills."""
    init: Any = cls.__init__  # type: ignore[misc]
    parameters = list(inspect.signature(init).parameters.values())[1:]  # NOTE: without `self`
    return tuple(p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


_PLAIN = (DataLoader, StatefulDataLoader)
"""Loader classes that carry no behaviour of the user's."""
_NOT_CARRIED = "__pl_"
"""Prefix of the construction arguments Lightning records on loaders; they describe the user's loader."""


_TAKEN_OVER = (("litdata", "StreamingDataLoader"),)
"""``(package, class)`` of library loaders whose iteration drives their own dataset's position and epoch
(LitData's): our loader takes that over, so they are replaced as a plain ``DataLoader`` is."""


def built_as_user_class(base: type, source: DataLoader, dataset: Any, **kwargs: Any) -> Any:
    """``base`` (one of our loader classes) over ``dataset`` and ``kwargs``; when ``source`` (the user's loader)
    is of a ``DataLoader`` subclass of the user's own, the loader is of that class too, with its attributes."""
    cls = type(source)
    taken_over = any((part.__module__.split(".")[0], part.__name__) in _TAKEN_OVER for part in cls.__mro__)
    user: type | None = None if cls in _PLAIN or taken_over else cls
    loader = with_user_class(base, user)(dataset, **kwargs)
    if user is not None:
        carry_user_attributes(loader, source)
    return loader


@functools.cache
def with_user_class(base: type, user: type | None) -> type:
    """``base`` (one of our loader classes) that is also an instance of the user's class ``user``."""
    if user is None or issubclass(base, user):
        return base
    return type(f"{base.__name__}Of{user.__name__}", (base, user), {"__module__": base.__module__})


def init_data_loader(loader: DataLoader, dataset: Any, **kwargs: Any) -> None:
    """Run ``DataLoader.__init__`` (``StatefulDataLoader``'s for a stateful loader) on ``loader``; not
    ``super().__init__``, which in a ``with_user_class`` class would run the user's with our arguments."""
    plain: Any = next(cls for cls in type(loader).__mro__ if cls in _PLAIN)  # NOTE: the stateful one first
    plain.__init__(loader, dataset, **kwargs)


def carry_user_attributes(
    loader: DataLoader, source: DataLoader, names: tuple[str, ...] | None = None
) -> None:
    """Give ``loader`` the attributes ``source`` (the user's loader) has and a ``DataLoader`` has not (only
    ``names``, if given), recording their names as ``user_attributes``."""
    own, theirs = vars(loader), vars(source)
    carried = {
        name: theirs[name]
        for name in (theirs if names is None else names)
        if name not in own and not name.startswith(_NOT_CARRIED)
    }
    own.update(carried, user_attributes=tuple(carried))


def rebuilt_as_user_class(source: DataLoader, dataset: Any, **kwargs: Any) -> DataLoader:
    """A loader of ``source``'s class over ``dataset`` and ``kwargs``, with ``source``'s attributes."""
    cls = type(source)
    if cls in _PLAIN:
        return cls(dataset, **kwargs)
    loader = cls.__new__(cls)
    init_data_loader(loader, dataset, **kwargs)
    carry_user_attributes(loader, source)
    return loader


_REBUILT_BY_US = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")
"""The ``DataLoader`` settings a prepared loader builds anew (the index source and the dataset)."""


def loader_settings(dataloader: DataLoader) -> dict[str, Any]:
    """The user's ``DataLoader`` settings we keep as they are (workers, collate, pinning, ...)."""
    parameters = inspect.signature(DataLoader.__init__).parameters
    return {
        name: getattr(dataloader, name, parameter.default)
        for name, parameter in parameters.items()
        if name != "self" and name not in _REBUILT_BY_US and parameter.kind is parameter.POSITIONAL_OR_KEYWORD
    }
