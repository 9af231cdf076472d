"""LitData's streaming datasets: recognised by class, split by LitData itself for this job's data-parallel
rank and size (docs/DESIGN.md, "LitData").

LitData assigns its chunks' items to ranks and ``DataLoader`` workers by itself, from the rank and world
size it detects when the dataset is built (``StreamingDataset.distributed_env``). Built before the
process group exists (a script's top, a ``LightningDataModule.__init__``) it detects one process, so every
rank reads the whole dataset; under a device mesh it detects the whole world, not the data-parallel
group. So at set-up its rank and size are set to the job's data-parallel ones, and LitData's own split
(by chunk, with its shuffle) then gives each rank a disjoint share.
"""

from __future__ import annotations

from typing import Any

LITDATA_CLASSES = ("StreamingDataset", "CombinedStreamingDataset", "ParallelStreamingDataset")
"""The LitData datasets that split themselves by rank (the two wrappers by their ``StreamingDataset``\\ s)."""

LITDATA_REASON = (
    "LitData assigns its chunks' items to ranks and workers by the world size, so a share read on "
    "{saved} processes has no counterpart on {now}"
)
"""Why a mid-epoch position does not carry over to another process count (formatted with both counts)."""


def litdata_class(dataset: Any) -> str | None:
    """The name of the LitData streaming class ``dataset`` is (or derives from), else ``None``.

    Recognised by module and class name, so the core never imports ``litdata``.
    """
    for cls in type(dataset).__mro__:
        if cls.__module__.split(".")[0] == "litdata" and cls.__name__ in LITDATA_CLASSES:
            return cls.__name__
    return None


def is_litdata(dataset: Any) -> bool:
    """Whether ``dataset`` is one of LitData's streaming datasets."""
    return litdata_class(dataset) is not None


def split_for(dataset: Any, num_processes: int, process_index: int) -> None:
    """Make LitData split ``dataset`` among ``num_processes`` processes, this one being ``process_index``.

    NOTE: sets the public ``distributed_env`` attribute of each ``StreamingDataset`` (the user's, in
    place: a copy of a combined dataset would have to replace its private list of datasets). Idempotent,
    so a loader prepared again sets the same. The number of nodes (LitData's node-aware shuffle) is kept
    where LitData detected this very world, else one.
    """
    for stream in _streaming_datasets(dataset):
        detected = stream.distributed_env
        nodes = detected.num_nodes if detected.world_size == num_processes else 1
        if (detected.world_size, detected.global_rank, detected.num_nodes) == (
            num_processes,
            process_index,
            nodes,
        ):
            continue
        # NOTE: LitData's environment class through the instance: its name is private to LitData.
        stream.distributed_env = type(detected)(
            world_size=num_processes, global_rank=process_index, num_nodes=nodes
        )


def _streaming_datasets(dataset: Any) -> list[Any]:
    """The ``StreamingDataset``\\ s ``dataset`` reads: itself, or those a combined / parallel one wraps."""
    if litdata_class(dataset) == "StreamingDataset":
        return [dataset]
    # NOTE: LitData's wrappers keep their datasets in `_datasets` and offer no public getter; read only.
    return [stream for inner in getattr(dataset, "_datasets", ()) for stream in _streaming_datasets(inner)]
