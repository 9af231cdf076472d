"""LitData's streaming datasets: recognised by class, split by LitData itself for this job's data-parallel
rank and size, which are set at set-up in place of those LitData detected when the dataset was built
(docs/DESIGN.md, "LitData").
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
        """Make LitData split the dataset among ``num_processes`` processes, this one being ``process_index``,
        with the loader's ``drop_last``: every process must split with the same values, and LitData's own
        come from a detection that differs between the processes of one job (docs/DESIGN.md, "LitData"). In
        place (idempotent): a copy of a combined dataset would have to replace its private list of datasets.
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
