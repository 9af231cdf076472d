"""Streams that split themselves by rank: what the loader must know of each, one ``SelfSplit`` per library
(docs/DESIGN.md, "Streams that split themselves"). The loader passes such a dataset through (striding it
again would keep ``1/N`` of each part). A library is added as one module with a ``recognise(dataset)``
returning its ``SelfSplit``, listed in ``SELF_SPLITTING`` (``loaders/kinds.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning_shard.sampling.samplers import pass_epoch

SHARES_STAY = (
    "the shares (whole shards per process) and each process's position in its share do not carry over"
)
"""Why a position within an epoch read as shares has no counterpart on another number of processes."""


class SelfSplit:
    """A dataset that splits itself by rank, as recognised; ``reason`` says how, completing "a dataset
    that ..." (``"declares `splits_by_rank = True`"``)."""

    dispatchable = False
    """Whether process 0 can be made to read all of it (``split(1, 0, ...)``), so that it can be dispatched."""
    yields_batches = False
    """Whether each element the dataset yields is already a batch (batched inside a pipeline), so that with
    ``DataLoader(batch_size=None)`` a step's samples are the element's rows, not one."""
    resumes_itself = False
    """Whether a position within an epoch is handed to the library (``save`` / ``restore``), which continues
    it on any number of processes; otherwise the loader reads again and drops what each process consumed."""

    def __init__(self, dataset: Any, reason: str) -> None:
        self.dataset = dataset
        self.reason = reason

    def split(self, num_processes: int, process_index: int, drop_last: bool) -> None:
        """Make the dataset split among ``num_processes`` processes, this one being ``process_index`` (or check
        that it does). Nothing for a dataset that knows the job's rank by itself."""

    def set_epoch(self, epoch: int) -> None:
        """Put the dataset at ``epoch``, before each pass (the dataset's own ``set_epoch``, if any)."""
        pass_epoch(self.dataset, epoch)

    def before_pass(self, epoch: int) -> None:
        """Called in the loader's process before each pass over the dataset (workers included) in ``epoch``."""

    def check_batches(self, batch_size: int | None, num_workers: int) -> None:
        """Refuse (a ``ValueError`` naming the setting and the fix) a loader of this batch size and number of
        workers if the dataset cannot be read by it."""

    def other_count(self, saved: int, now: int) -> str:
        """Why a position within an epoch read by ``saved`` processes has no counterpart on ``now``."""
        return SHARES_STAY

    def save(self, epoch: int, consumed: int) -> dict[str, Any] | None:
        """The library's own state once the processes consumed ``consumed`` samples of ``epoch`` together
        (``resumes_itself`` only; plain data, the same on every process)."""
        return None

    def check_restore(self, state: dict[str, Any]) -> None:
        """A ``ValueError`` when this dataset cannot continue ``state`` exactly (``resumes_itself`` only): called
        when the state is loaded, so that a refusal comes then."""

    def restore(self, state: dict[str, Any], epoch: int, consumed: int) -> None:
        """Have the library continue ``epoch`` after ``consumed`` samples at its next pass (``resumes_itself``
        only): called once, when that epoch's iteration begins (never at load: Lightning loads twice)."""


def declared(dataset: Any) -> SelfSplit | None:
    """A dataset that declares ``splits_by_rank = True``."""
    if getattr(dataset, "splits_by_rank", False) is True:
        return SelfSplit(dataset, "declares `splits_by_rank = True`")
    return None


def defined_in(dataset: Any, package: str, names: tuple[str, ...]) -> str | None:
    """The name of the class of ``package`` among ``names`` that ``dataset`` is (or derives from), else
    ``None``: libraries are recognised by module and class name, so the core never imports them."""
    for cls in type(dataset).__mro__:
        if cls.__module__.split(".")[0] == package and cls.__name__ in names:
            return cls.__name__
    return None


Recogniser = Callable[[Any], "SelfSplit | None"]
