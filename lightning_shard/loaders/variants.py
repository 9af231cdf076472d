"""``stateful_loader_class``: the loader class that is also torchdata's ``StatefulDataLoader``.

A factory, chosen by ``prepare_data_loader`` (``use_stateful_dataloader=True``) or called by users who
subclass a loader; it never changes the class of an object being constructed.
"""

from __future__ import annotations

import functools

from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_shard.loaders.base import ResumableLoader
from lightning_shard.loaders.dispatcher import DataLoaderDispatcher, StatefulDataLoaderDispatcher
from lightning_shard.loaders.shard import DataLoaderShard, StatefulDataLoaderShard

_BUILT_IN: dict[type, type] = {
    DataLoaderShard: StatefulDataLoaderShard,
    DataLoaderDispatcher: StatefulDataLoaderDispatcher,
}


@functools.cache
def stateful_loader_class(cls: type) -> type:
    """``cls`` combined with ``StatefulDataLoader`` (``cls`` itself when it already is one).

    Our state stays the loader's ``state_dict()``: the shard state comes first in the class order.

    Raises:
        TypeError: if ``cls`` is not a ``DataLoaderShard`` or ``DataLoaderDispatcher`` (sub)class.
    """
    if not (isinstance(cls, type) and issubclass(cls, ResumableLoader)):
        raise TypeError(
            f"`stateful_loader_class` takes `DataLoaderShard`, `DataLoaderDispatcher` or a subclass, got "
            f"{cls!r}. Pass the loader class itself, e.g. `stateful_loader_class(MyShard)`."
        )
    if issubclass(cls, StatefulDataLoader):
        return cls
    if cls in _BUILT_IN:
        return _BUILT_IN[cls]
    return type(f"Stateful{cls.__name__}", (cls, StatefulDataLoader), {"__module__": cls.__module__})
