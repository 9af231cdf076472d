"""Datasets, user loaders and batch normalisation shared by the loader tests and benchmarks.

Every dataset is module-level (spawned processes and DataLoader workers pickle it) and tells which
sample it holds: sample ``i`` carries the integer ``i`` in every leaf, so a batch can be read back as
the list of sample indices it contains.
"""

from __future__ import annotations

import random
from collections import namedtuple
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, default_collate

Point = namedtuple("Point", ["a", "b"])

TENSOR, NESTED, NESTED_TENSORS = "tensor", "nested", "nested_tensors"


def sample(index: int, form: str) -> Any:
    """Sample ``index`` as a plain tensor, or nested: dict / tuple / namedtuple with string leaves.

    ``NESTED_TENSORS`` is ``NESTED`` with tensors where the strings were (the reference cannot
    dispatch strings).
    """
    if form == TENSOR:
        return torch.tensor([index, 10 * index])
    strings = form == NESTED
    return {
        "x": torch.tensor(float(index)),
        "pair": (torch.tensor([index, -index]), f"s{index}" if strings else torch.tensor(index)),
        "point": Point(
            a=torch.tensor(index, dtype=torch.int32), b=f"p{index}" if strings else torch.tensor(index)
        ),
    }


class FormMap(Dataset):
    """A map-style dataset of ``length`` samples; counts ``__getitem__`` calls (in this process)."""

    def __init__(self, length: int, form: str = TENSOR) -> None:
        self.length = length
        self.form = form
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, list):  # NOTE: a batch sampler passed as `sampler` fetches whole batches.
            return default_collate([self[i] for i in index])
        self.loaded.append(index)
        return sample(index, self.form)


class FormStream(IterableDataset):
    """An iterable dataset of ``length`` samples, in order or, with ``shuffle``, in a generator order.

    With ``shuffle`` it has a ``generator`` attribute, as the reference expects of a dataset whose
    generator it synchronises; the order of an epoch is drawn from that generator.
    """

    def __init__(self, length: int, form: str = TENSOR, shuffle: bool = False, sized: bool = True) -> None:
        self.length = length
        self.form = form
        self.sized = sized
        self.generator = torch.Generator().manual_seed(0) if shuffle else None

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("this stream has no length")
        return self.length

    def __iter__(self) -> Iterator[Any]:
        order = (
            torch.randperm(self.length, generator=self.generator).tolist()
            if self.generator is not None
            else range(self.length)
        )
        for index in order:
            yield sample(index, self.form)


@dataclass(frozen=True)
class LoaderCase:
    """A user ``DataLoader`` configuration and the options to prepare it with."""

    iterable: bool = False
    length: int = 10
    batch_size: int = 2
    drop_last: bool = False
    form: str = TENSOR
    shuffle: str | None = None  # None, "global" (unseeded RandomSampler), "generator", "seedable"
    num_workers: int = 0
    epochs: int = 1
    seed: int = 0
    seed_per_rank: bool = False  # seed the global RNG differently on each rank
    batch_sampler_as_sampler: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    def _workers(self) -> dict[str, Any]:
        # NOTE: a spawned test process would spawn its workers too (seconds each); fork is enough here.
        return {
            "num_workers": self.num_workers,
            "multiprocessing_context": "fork" if self.num_workers else None,
        }

    def user_loader(self) -> DataLoader:
        """A fresh user loader (the reference mutates the one it is given)."""
        if self.iterable:
            dataset: Any = FormStream(self.length, self.form, shuffle=self.shuffle is not None)
            return DataLoader(
                dataset, batch_size=self.batch_size, drop_last=self.drop_last, **self._workers()
            )
        dataset = FormMap(self.length, self.form)
        generator = torch.Generator().manual_seed(self.seed + 99) if self.shuffle == "generator" else None
        if self.batch_sampler_as_sampler:
            from torch.utils.data import BatchSampler, SequentialSampler

            batches = BatchSampler(SequentialSampler(dataset), self.batch_size, self.drop_last)
            return DataLoader(dataset, sampler=batches, batch_size=None, **self._workers())
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=self.shuffle is not None,
            drop_last=self.drop_last,
            generator=generator,
            **self._workers(),
        )

    def prepare_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.options)
        if self.shuffle == "seedable":
            kwargs.setdefault("use_seedable_sampler", True)
        if "rng_types" in kwargs:
            kwargs["rng_types"] = list(kwargs["rng_types"])  # NOTE: the reference edits it in place.
        return kwargs


def indices(batch: Any) -> list[int]:
    """The sample indices a batch holds, read from its first tensor leaf."""
    if isinstance(batch, torch.Tensor):
        return [int(row[0]) for row in batch] if batch.dim() == 2 else [int(v) for v in batch.tolist()]
    if isinstance(batch, dict):
        return [int(v) for v in batch["x"].tolist()]
    raise TypeError(f"unexpected batch {type(batch).__name__}")


def normalise(batch: Any) -> Any:
    """``batch`` as comparable plain data: tensors become (dtype, shape, values), containers keep type."""
    if isinstance(batch, torch.Tensor):
        return ("tensor", str(batch.dtype), tuple(batch.shape), batch.tolist())
    if isinstance(batch, dict):
        return {key: normalise(value) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return (type(batch).__name__, tuple(normalise(item) for item in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(normalise(item) for item in batch)
    return batch


def core(batch: Any) -> Any:
    """The tensors a nested batch has in both ``NESTED`` forms, normalised, in their containers."""
    return {
        "x": normalise(batch["x"]),
        "pair": (type(batch["pair"]).__name__, normalise(batch["pair"][0])),
        "point": (type(batch["point"]).__name__, normalise(batch["point"].a)),
    }


def shuffled_names(rng: random.Random, items: list[Any], count: int) -> list[Any]:
    """``count`` items drawn from ``items`` with ``rng`` (a fixed, reproducible sub-grid)."""
    return [rng.choice(items) for _ in range(count)]
