"""``IterableDatasetShard``: one process's share of an iterable dataset, by whole or split batches."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterableDataset

from lightning_shard._checks import (
    check_non_negative,
    check_num_processes,
    check_positive,
    check_process_index,
    check_split_batch_size,
)
from lightning_shard.sampling.samplers import dataset_generator, pass_epoch, takes_epoch
from lightning_shard.sampling.stream_fingerprint import Fingerprinted, checked_step, fingerprint


class IterableDatasetShard(IterableDataset):
    """Yields this process's elements of ``dataset``, batch by global batch.

    Elements are read in global batches (``batch_size * N`` elements, or ``batch_size`` with
    ``split_batches``); process ``r`` yields slice ``r`` of each. Unless ``drop_last``, the last,
    incomplete global batch is completed with elements from the first one, so every process yields
    the same number of elements. Every process reads the whole stream, so all stop together.

    Args:
        dataset: the iterable dataset to shard.
        batch_size: the per-process batch size, or the global one with ``split_batches=True``.
        drop_last: drop the last incomplete global batch instead of padding it.
        num_processes: the number of data-parallel processes ``N``.
        process_index: this process's index in ``[0, N)``.
        split_batches: ``batch_size`` is the global batch size, split across processes.
        even_batches: pad the last global batch (the reference always does); ``False`` yields its
            remainder unpadded, as a plain ``DataLoader`` does (``prepare_data_loader`` uses that
            for a single process only, where the reference does not shard at all).
        fingerprinted: mark the first element this process yields of each compared global batch
            (``checked_step``, counted in each ``DataLoader`` worker or the main process) with the batch's
            ``Fingerprint``, which the loader compares across processes (``sampling/stream_fingerprint.py``).

    Raises:
        TypeError / ValueError: on a bad ``num_processes``, ``process_index`` or ``batch_size``, or
            with ``split_batches=True`` when ``batch_size`` is not a multiple of ``N``.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        *,
        even_batches: bool = True,
        fingerprinted: bool = False,
    ) -> None:
        self.num_processes = check_num_processes(num_processes)
        self.process_index = check_process_index(process_index, self.num_processes)
        check_positive("batch_size", batch_size, "the number of samples per batch, e.g. `batch_size=8`")
        if split_batches:
            check_split_batch_size(batch_size, self.num_processes, "iterable dataset")
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.fingerprinted = fingerprinted
        self.epoch = 0
        self._skip_steps = self._skip_elements = 0

    @property
    def global_batch_size(self) -> int:
        """Elements read per step across all processes."""
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    @property
    def process_batch_size(self) -> int:
        """Elements this process yields per step."""
        return self.batch_size // self.num_processes if self.split_batches else self.batch_size

    def set_epoch(self, epoch: int) -> None:
        """Record ``epoch`` and forward it to the dataset when it takes one."""
        self.epoch = epoch
        pass_epoch(self.dataset, epoch)

    def __len__(self) -> int:
        """Elements this process yields; exact for ``split_batches`` too (unlike the reference)."""
        return self.length_after(0)

    def length_after(self, consumed: int, process_index: int | None = None) -> int:
        """Elements this process (or process ``process_index``) yields once ``consumed`` elements are gone."""
        full, rest = divmod(max(len(self.dataset) - consumed, 0), self.global_batch_size)
        if self.drop_last or rest == 0:
            return full * self.process_batch_size
        if self.even_batches:
            return (full + 1) * self.process_batch_size
        lo = (self.process_index if process_index is None else process_index) * self.process_batch_size
        return full * self.process_batch_size + min(max(rest - lo, 0), self.process_batch_size)

    def over(self, dataset: Any) -> IterableDatasetShard:
        """A shard as this one over ``dataset`` (a replay of its epoch, ``loaders/strided_source.py``), whose
        elements are not marked (the replay's global batches are not compared)."""
        twin = copy.copy(self)
        twin.dataset, twin.fingerprinted = dataset, False
        return twin

    def seed_dataset_generator(self) -> None:
        """Seed the dataset's generator with the epoch, as ``__iter__`` does (a replay reads it too)."""
        # NOTE: as the reference, a dataset with a generator but no `set_epoch` is re-seeded with the
        # epoch, so every process draws the same stream.
        generator = dataset_generator(self.dataset)
        if generator is not None and not takes_epoch(self.dataset):
            generator.manual_seed(self.epoch)

    def resume(self, skip_steps: int = 0, skip_elements: int = 0) -> None:
        """Make the next iteration (only) skip elements of the stream, then whole global batches.

        ``skip_elements`` are read and dropped before batching starts (an elastic restore: another
        number of processes consumed them); ``skip_steps`` global batches are then read but not
        yielded, so the end-of-epoch padding still comes from the epoch's first batch.
        """
        self._skip_steps = check_non_negative("skip_steps", skip_steps)
        self._skip_elements = check_non_negative("skip_elements", skip_elements)

    def __iter__(self) -> Iterator[Any]:
        # NOTE: the skip is taken by the iteration created now (the DataLoader's, right after `resume`), not by
        # whichever first asks for an element.
        skip_steps, skip_elements = self._skip_steps, self._skip_elements
        self._skip_steps = self._skip_elements = 0
        return self._elements(skip_steps, skip_elements)

    def _elements(self, skip_steps: int, skip_elements: int) -> Iterator[Any]:
        self.seed_dataset_generator()
        width, size = self.process_batch_size, self.global_batch_size
        lo, hi = self.process_index * width, (self.process_index + 1) * width
        stream = iter(self.dataset)
        first = _read_head(stream, skip_elements, size)
        step = 0
        while len(current := list(itertools.islice(stream, size))) == size:
            first = first if first is not None else current
            if step >= skip_steps:
                yield from _part(current, lo, hi, self.fingerprinted and checked_step(step))
            step += 1
        if self.drop_last or not current or step < skip_steps:
            return
        head = first if first is not None else list(current)
        if self.even_batches:
            while len(current) < size:
                current += head
        yield from _part(current, lo, hi, self.fingerprinted and checked_step(step))


def _part(read: list[Any], lo: int, hi: int, marked: bool) -> list[Any]:
    """``read[lo:hi]``, this process's slice of the global batch ``read``; if ``marked``, its first element
    ``Fingerprinted`` by ``read``."""
    part = read[lo:hi]
    return [Fingerprinted(part[0], fingerprint(read)), *part[1:]] if marked and part else part


def _read_head(stream: Iterator[Any], count: int, size: int) -> list[Any] | None:
    """Drop ``count`` elements of ``stream``; return the first ``size`` of them if there were that many."""
    head = list(itertools.islice(stream, min(count, size)))
    next(itertools.islice(stream, count - len(head), count - len(head)), None)
    return head if len(head) == size else None
