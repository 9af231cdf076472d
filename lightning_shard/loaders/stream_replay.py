"""The rest of a strided stream's epoch, read by ``DataLoader`` workers, continued on another number of
processes (docs/DESIGN.md, "Elastic resume").

With ``W`` workers each worker reads its own part of the stream (split by the dataset, e.g. through
``get_worker_info()``) and groups it into global batches of ``G`` elements (``G`` = the global batch
of the topology the epoch started on); the ``DataLoader`` hands the groups out worker after worker.
That interleaving *is* the epoch's order, and it depends on ``G``: on another number of processes the
same workers would group, and so interleave, differently. Skipping the consumed elements inside each
worker would skip each worker's first elements, not the first elements of the epoch.

So the epoch is replayed as it was read: ``W`` workers, groups of ``G``, the first ``S`` groups (the
steps taken) dropped; what follows is the rest of the epoch in its order, which this process strides
over like any stream (``IterableDatasetShard``), in the main process.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from lightning_shard.loaders.settings import loader_settings
from lightning_shard.sampling.iterable_shard import IterableDatasetShard

_WORKER_SETTINGS = ("worker_init_fn", "multiprocessing_context", "prefetch_factor", "timeout")
"""The user's ``DataLoader`` settings that decide how the workers read; everything else is ours."""


class ReplayedOrder(IterableDataset):
    """The elements of ``dataset`` in the order ``workers`` workers delivered them in groups of
    ``group``, after the first ``skip_groups`` groups.

    Args:
        dataset: the user's stream (which splits itself among workers).
        group: the global batch size the epoch was read with.
        workers: the number of ``DataLoader`` workers it was read with (at least 1).
        skip_groups: the groups (steps) already consumed.
        drop_last: whether an incomplete last group of a worker was dropped.
        settings: the user's ``DataLoader`` settings (worker start-up and context).
    """

    def __init__(
        self,
        dataset: Any,
        *,
        group: int,
        workers: int,
        skip_groups: int,
        drop_last: bool,
        settings: dict[str, Any],
    ) -> None:
        self.dataset = dataset
        self.group = group
        self.workers = workers
        self.skip_groups = skip_groups
        self.drop_last = drop_last
        self.settings = {name: settings[name] for name in _WORKER_SETTINGS if name in settings}

    def __iter__(self) -> Iterator[Any]:
        groups = DataLoader(
            self.dataset,
            batch_size=self.group,
            drop_last=self.drop_last,
            collate_fn=_elements,
            num_workers=self.workers,
            **self.settings,
        )
        for group in itertools.islice(groups, self.skip_groups, None):
            yield from group


def _elements(batch: list[Any]) -> list[Any]:
    return batch


def replayed_batches(
    shard: IterableDatasetShard,
    *,
    consumed: int,
    steps: int,
    workers: int,
    start: int,
    loader: DataLoader,
) -> Iterator[Any]:
    """This process's batches of the rest of an epoch that ``workers`` workers read for ``steps`` steps.

    Args:
        shard: this loader's shard of the stream (this topology).
        consumed: elements the ``steps`` steps consumed (``steps`` whole global batches).
        steps: steps taken on the topology the epoch started on.
        workers: the workers the epoch was read with.
        start: steps this topology already took of the rest (a later resume on the same count).
        loader: the prepared loader (its batch size, collation and pinning).
    """
    shard.seed_dataset_generator()
    order = ReplayedOrder(
        shard.dataset,
        group=consumed // steps,
        workers=workers,
        skip_groups=steps,
        drop_last=shard.drop_last,
        settings=loader_settings(loader),
    )
    rest = IterableDatasetShard(
        order,
        batch_size=shard.batch_size,
        drop_last=shard.drop_last,
        num_processes=shard.num_processes,
        process_index=shard.process_index,
        split_batches=shard.split_batches,
        even_batches=shard.even_batches,
    )
    rest.resume(skip_steps=start)
    return iter(
        DataLoader(
            rest,
            batch_size=loader.batch_size,
            drop_last=loader.drop_last,
            collate_fn=loader.collate_fn,
            pin_memory=loader.pin_memory,
        )
    )
