"""A user's ``DataLoader`` subclass survives preparation: the prepared loader is of our class and the user's, with
the user's attributes, its ``__init__`` not run again (docs/DESIGN.md, "Real loader subclasses"); and what a
loader keeps of the user's ``DataLoader`` settings (``loader_settings``)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

_PLAIN = (DataLoader, StatefulDataLoader)
"""Loader classes that carry no behaviour of the user's."""
_NOT_CARRIED = "__pl_"
"""Prefix of the construction arguments Lightning records on loaders; they describe the user's loader."""


_TAKEN_OVER = (("litdata", "StreamingDataLoader"),)
"""``(package, class)`` of library loaders whose iteration drives their own dataset's position and epoch
(LitData's): our loader takes that over, so they are replaced as a plain ``DataLoader`` is."""


def user_loader_class(dataloader: DataLoader) -> type | None:
    """The user's own ``DataLoader`` subclass ``dataloader`` is an instance of, or ``None``."""
    cls = type(dataloader)
    taken_over = any((base.__module__.split(".")[0], base.__name__) in _TAKEN_OVER for base in cls.__mro__)
    return None if cls in _PLAIN or taken_over else cls


@functools.cache
def with_user_class(base: type, user: type | None) -> type:
    """``base`` (one of our loader classes) that is also an instance of the user's class ``user``."""
    if user is None or issubclass(base, user):
        return base
    return type(f"{base.__name__}Of{user.__name__}", (base, user), {"__module__": base.__module__})


def init_data_loader(loader: DataLoader, dataset: Any, **kwargs: Any) -> None:
    """Run ``DataLoader.__init__`` (``StatefulDataLoader``'s for a stateful loader) on ``loader``; not
    ``super().__init__``, which in a ``with_user_class`` class would run the user's with our arguments."""
    base = StatefulDataLoader if isinstance(loader, StatefulDataLoader) else DataLoader
    base.__init__(loader, dataset, **kwargs)


def carry_user_attributes(
    loader: DataLoader, source: DataLoader, names: tuple[str, ...] | None = None
) -> None:
    """Give ``loader`` the attributes ``source`` (the user's loader) has and a ``DataLoader`` has not (only
    ``names``, if given), recording their names as ``user_attributes``."""
    own = vars(loader)
    carried = [
        name
        for name in (vars(source) if names is None else names)
        if name not in own and not name.startswith(_NOT_CARRIED)
    ]
    for name in carried:
        own[name] = vars(source)[name]
    own["user_attributes"] = tuple(carried)


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
