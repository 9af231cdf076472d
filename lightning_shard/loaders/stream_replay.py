"""The rest of a strided stream's epoch, read by ``DataLoader`` workers, continued on another number of
processes: replayed as it was read (its workers, its global batch), not skipped inside each worker, which
would skip each worker's first elements rather than the epoch's (docs/DESIGN.md, "Elastic resume")."""

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
    """The elements of ``dataset`` in the order a ``DataLoader`` of ``settings`` (the epoch's workers, its
    global batch as ``batch_size``) delivered them, after the first ``skip_groups`` global batches."""

    def __init__(self, dataset: Any, skip_groups: int, **settings: Any) -> None:
        self.dataset = dataset
        self.skip_groups = skip_groups
        self.settings = settings

    def __iter__(self) -> Iterator[Any]:
        groups = DataLoader(self.dataset, collate_fn=_elements, **self.settings)
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
    """This process's batches of the rest of an epoch that ``workers`` workers read for ``steps`` steps
    (``consumed`` elements), of which this ``shard`` (this topology) already took ``start`` steps."""
    shard.seed_dataset_generator()
    settings = loader_settings(loader)
    order = ReplayedOrder(
        shard.dataset,
        steps,
        batch_size=consumed // steps,
        drop_last=shard.drop_last,
        num_workers=workers,
        **{name: settings[name] for name in _WORKER_SETTINGS if name in settings},
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
