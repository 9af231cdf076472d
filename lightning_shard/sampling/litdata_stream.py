"""LitData's streaming datasets: recognised by class, split by LitData itself for this job's data-parallel
rank and size (docs/DESIGN.md, "LitData").

LitData assigns its chunks' items to ranks and ``DataLoader`` workers by itself, from the rank and world
size it detects when the dataset is built (``StreamingDataset.distributed_env``). Built before the
process group exists (a script's top, a ``LightningDataModule.__init__``) it detects one process, so every
rank reads the whole dataset; under a device mesh it detects the whole world, not the data-parallel
group. So at set-up its rank and size are set to the job's data-parallel ones (and its ``drop_last`` to
the loader's, the same on every process), and LitData's own split (by chunk, with its shuffle) then gives
each rank a disjoint share.
"""

from __future__ import annotations

from typing import Any

from lightning_shard.sampling.self_split import SelfSplit, defined_in

LITDATA_CLASSES = ("StreamingDataset", "CombinedStreamingDataset", "ParallelStreamingDataset")
"""The LitData datasets that split themselves by rank (the two wrappers by their ``StreamingDataset``\\ s)."""


class LitDataSplit(SelfSplit):
    """A LitData streaming dataset: told the job's rank, so it can also read everything for process 0."""

    dispatchable = True

    def split(self, num_processes: int, process_index: int, drop_last: bool) -> None:
        """Make LitData split the dataset among ``num_processes`` processes, this one being ``process_index``.

        ``drop_last`` is the loader's: LitData trims every share to the same length with it, and every
        process must split with the same value.

        NOTE: sets each ``StreamingDataset``'s public ``distributed_env`` attribute and ``set_drop_last``, on
        the user's dataset (a copy of a combined dataset would have to replace its private list of datasets);
        idempotent, so a loader prepared again sets the same. LitData's own defaults are replaced because they
        come from its detection when the dataset is built, which differs between the processes of one job
        (under Lightning's launcher the first process builds it before the process group exists, the others
        with ``WORLD_SIZE`` set: one process in the first, rank 0 of 2 in the others, ``drop_last`` off in the
        first, on in the others), and splits computed from different values overlap. One node: LitData's node
        count only groups chunks by node for its cache, and its detection differs between processes too.
        """
        for stream in _streaming_datasets(self.dataset):
            # NOTE: LitData's environment class through the instance: its name is private to LitData.
            stream.distributed_env = type(stream.distributed_env)(
                world_size=num_processes, global_rank=process_index, num_nodes=1
            )
            stream.set_drop_last(drop_last)

    def other_count(self, saved: int, now: int) -> str:
        return (
            f"LitData assigns its chunks' items to ranks and workers by the world size, so a share read on {saved} "
            f"processes has no counterpart on {now}"
        )


def recognise(dataset: Any) -> LitDataSplit | None:
    """The ``SelfSplit`` of a LitData streaming dataset, else ``None``."""
    name = defined_in(dataset, "litdata", LITDATA_CLASSES)
    return None if name is None else LitDataSplit(dataset, f"is a LitData `{name}`")


def _streaming_datasets(dataset: Any) -> list[Any]:
    """The ``StreamingDataset``\\ s ``dataset`` reads: itself, or those a combined / parallel one wraps."""
    if defined_in(dataset, "litdata", ("StreamingDataset",)):
        return [dataset]
    # NOTE: LitData's wrappers keep their datasets in `_datasets` and offer no public getter; read only.
    return [stream for inner in getattr(dataset, "_datasets", ()) for stream in _streaming_datasets(inner)]
