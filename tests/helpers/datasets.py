"""The datasets the tests share. Naming: ``<what a sample holds><Map | Stream>`` (map-style or iterable).

Every dataset is module-level (spawned processes and DataLoader workers pickle it) and says which
sample it holds, so what a loader yields names the samples.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Dataset, IterableDataset


class IdMap(Dataset):
    """Sample ``i`` is ``i``; sample ``bad`` raises, as a corrupt file would."""

    def __init__(self, length: int, bad: int | None = None) -> None:
        self.length, self.bad = length, bad

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        if index == self.bad:
            raise OSError(f"sample {index} is corrupt")
        return index


class IdStream(IterableDataset):
    """The ids ``0 .. length - 1`` (or the given ``ids``) in order; id ``bad`` raises; sized unless told."""

    def __init__(self, ids: int | Sequence[int], bad: int | None = None, sized: bool = True) -> None:
        self.ids = list(range(ids)) if isinstance(ids, int) else list(ids)
        self.bad, self.sized = bad, sized

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("this stream has no length")
        return len(self.ids)

    def __iter__(self) -> Iterator[int]:
        for index in self.ids:
            if index == self.bad:
                raise OSError(f"element {index} is corrupt")
            yield index


class ShuffledIdStream(IterableDataset):
    """The ids ``0 .. length - 1``, shuffled by its ``generator`` when ``shuffle`` (the shard re-seeds it)."""

    def __init__(self, length: int, shuffle: bool) -> None:
        self.length = length
        self.generator = torch.Generator() if shuffle else None

    def __iter__(self) -> Iterator[int]:
        if self.generator is None:
            return iter(range(self.length))
        return iter(torch.randperm(self.length, generator=self.generator).tolist())


def id_shards(lengths: Sequence[int]) -> list[list[int]]:
    """Consecutive ids, one shard per length: ``[3, 0, 2]`` gives ``[[0, 1, 2], [], [3, 4]]``."""
    shards, low = [], 0
    for length in lengths:
        shards.append(list(range(low, low + length)))
        low += length
    return shards


def worker_split() -> tuple[int, int]:
    """``(W, w)``: the number of ``DataLoader`` workers and this one's index (``(1, 0)`` outside workers)."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return (info.num_workers, info.id) if info is not None else (1, 0)


def contiguous_groups(count: int, num_groups: int, index: int) -> range:
    """Which of ``count`` pieces group ``index`` of ``num_groups`` holds: contiguous, the first ones larger
    (how Hugging Face ``datasets`` assigns shards)."""
    size, extra = divmod(count, num_groups)
    start = index * size + min(index, extra)
    return range(start, start + size + (index < extra))


class IdShardsStream(IterableDataset):
    """The ids of each shard in turn; implements the ``n_shards`` / ``shard(num_shards, index)`` protocol.

    Every element read is also appended to ``log`` (a file path) when given, so a test can count reads
    across processes and ``DataLoader`` workers.
    """

    def __init__(self, shards: Sequence[Sequence[int]], log: str | None = None) -> None:
        self.shards = [list(shard) for shard in shards]
        self.log = log

    @property
    def n_shards(self) -> int:
        return len(self.shards)

    def shard(self, num_shards: int, index: int) -> IdShardsStream:
        picked = contiguous_groups(len(self.shards), num_shards, index)
        return IdShardsStream([self.shards[i] for i in picked], self.log)

    def __iter__(self) -> Iterator[int]:
        for shard in self.shards:
            for index in shard:
                if self.log is not None:
                    with open(self.log, "a") as log:
                        log.write(f"{index}\n")
                yield index


class WorkerSplitIdStream(IterableDataset):
    """The ids ``0 .. length - 1``, split among ``DataLoader`` workers as torch's documentation shows:
    worker ``w`` of ``W`` yields ids ``w, w + W, ...``, so what each worker reads depends on ``W``."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Iterator[int]:
        workers, worker = worker_split()
        return iter(range(worker, self.length, workers))


class RankSplitIdStream(IterableDataset):
    """A stream that splits itself by rank (and worker), as LitData's ``StreamingDataset`` does: process
    ``r`` of ``N`` reads shards ``r, r + N, ...``; it declares it with ``splits_by_rank = True``."""

    splits_by_rank = True

    def __init__(self, shards: Sequence[Sequence[int]]) -> None:
        self.shards = [list(shard) for shard in shards]

    def __iter__(self) -> Iterator[int]:
        import torch.distributed as dist

        rank, size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        workers, worker = worker_split()
        for shard in self.shards[rank::size][worker::workers]:
            yield from shard


class UndeclaredRankSplitIdStream(RankSplitIdStream):
    """``RankSplitIdStream`` that does not declare its split: a user's stream calling
    ``torch.distributed.get_rank()`` in ``__iter__``, which nothing can recognise."""

    splits_by_rank = None


def _unseeded_noise(size: int) -> torch.Tensor:
    """``size`` floats from a generator seeded by the operating system: different in every process."""
    import os

    return torch.rand(size, generator=torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little")))


class AugmentedIdStream(IterableDataset):
    """The same ids on every process (split among ``DataLoader`` workers), each with a random "augmented"
    feature drawn in ``__iter__`` from an unseeded generator: ``{"x": noise + id, "id": id}``."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Iterator[dict[str, object]]:
        workers, worker = worker_split()
        for index in range(worker, self.length, workers):
            yield {"x": _unseeded_noise(2) + index, "id": index}


class NoiseStream(IterableDataset):
    """``length`` random feature vectors and nothing that names them (different in every process)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Iterator[torch.Tensor]:
        workers, worker = worker_split()
        for _ in range(worker, self.length, workers):
            yield _unseeded_noise(3)


class DeclaredNoiseStream(NoiseStream):
    """``NoiseStream`` declaring that every process reads the same stream (its elements are random)."""

    splits_by_rank = False


def _rank_part(items: list[object]) -> list[object]:
    """Process ``r`` of ``N``'s part of ``items``: ``r, r + N, ...``, as a user's stream splitting itself by
    ``torch.distributed.get_rank()`` takes it (the whole of it without a process group)."""
    import torch.distributed as dist

    rank, size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    return items[rank::size]


class LabelledRankSplitStream(IterableDataset):
    """``(features, label)`` for ids ``0 .. length - 1``, sorted by class (``classes`` labels in runs), split by
    rank unsaid and among workers: every process's first batch holds the same label. ``features`` is the id as
    a float, so what was trained names the samples."""

    def __init__(self, length: int, classes: int = 4) -> None:
        self.length, self.classes = length, classes

    def __iter__(self) -> Iterator[object]:
        workers, worker = worker_split()
        items: list[object] = [
            (torch.tensor([float(i)]), i * self.classes // self.length) for i in range(self.length)
        ]
        yield from _rank_part(items)[worker::workers]


class TaggedRankSplitStream(IterableDataset):
    """``{"emb": the id as a float, "lang": "en"}`` for ids ``0 .. length - 1``, split by rank unsaid and among
    workers: every element carries the same tag."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Iterator[object]:
        workers, worker = worker_split()
        items: list[object] = [{"emb": torch.tensor([float(i)]), "lang": "en"} for i in range(self.length)]
        yield from _rank_part(items)[worker::workers]


class LateSplitIdStream(IterableDataset):
    """The ids ``0 .. head - 1`` on every process, then ``head .. length - 1`` split by rank unsaid (a stream
    whose split begins after its first global batch); split among workers after that."""

    def __init__(self, length: int, head: int) -> None:
        self.length, self.head = length, head

    def __iter__(self) -> Iterator[object]:
        workers, worker = worker_split()
        items = [*range(self.head), *_rank_part(list(range(self.head, self.length)))]
        yield from items[worker::workers]


class MaskedTokenStream(IterableDataset):
    """The same stream on every process: ``{"tokens": [i, i + 1, i + 2] with each token masked (-1) at
    random, "pos": i as a float}``, the masks drawn in ``__iter__`` from torch's global generator (MLM-style
    masking; nothing names the element). Split among workers."""

    def __init__(self, length: int) -> None:
        self.length = length

    def masked(self, index: int) -> torch.Tensor:
        tokens = torch.arange(index, index + 3)
        return torch.where(torch.rand(3) < 0.5, torch.full_like(tokens, -1), tokens)

    def __iter__(self) -> Iterator[object]:
        workers, worker = worker_split()
        for index in range(worker, self.length, workers):
            yield {"tokens": self.masked(index), "pos": torch.tensor([float(index)])}


class OwnRandomMaskedTokenStream(MaskedTokenStream):
    """``MaskedTokenStream`` drawing its masks from a ``random.Random`` of its own, seeded by the operating
    system: different in every process, which the package cannot make alike."""

    def __iter__(self) -> Iterator[object]:
        import random

        draws = random.Random()
        workers, worker = worker_split()
        for index in range(worker, self.length, workers):
            tokens = torch.tensor([-1 if draws.random() < 0.5 else index + k for k in range(3)])
            yield {"tokens": tokens, "pos": torch.tensor([float(index)])}


class DeclaredOwnRandomMaskedTokenStream(OwnRandomMaskedTokenStream):
    """``OwnRandomMaskedTokenStream`` declaring that every process reads the same stream."""

    splits_by_rank = False


class MaskedIdStream(IterableDataset):
    """The ids ``0 .. length - 1`` split among ``DataLoader`` workers, each element ``(id, two random integers)``
    drawn in ``__iter__`` from torch's global generator: the same stream on every process only if the draws
    are made alike (nothing names the element, so it is compared by whole contents)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Iterator[object]:
        workers, worker = worker_split()
        for index in range(worker, self.length, workers):
            yield index, torch.randint(0, 1000, (2,))
