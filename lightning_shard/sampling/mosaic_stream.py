"""mosaicml-streaming's ``StreamingDataset``: recognised by class, passed through as each process's own part,
and resumed through its own state (docs/DESIGN.md, "Streams that split themselves"): a position is a count
of samples of the library's one global order, which it continues on any number of processes.
"""

from __future__ import annotations

from typing import Any

from lightning_shard.sampling.self_split import SelfSplit, defined_in

_SHUFFLE = "shuffle"
"""The key under which the saved state records ``shuffle``, which the library's own state does not hold."""


class MosaicSplit(SelfSplit):
    """A mosaicml-streaming ``StreamingDataset``: checked against the job's size, resumed by the library."""

    resumes_itself = True

    def split(self, num_processes: int, process_index: int, drop_last: bool) -> None:
        """Check that the dataset was built for ``num_processes`` processes (it reads its rank and world size
        from the environment when built, and cannot be told them afterwards): a ``ValueError`` if not."""
        dataset = self.dataset
        expected = -(-int(dataset.epoch_size) // num_processes)
        if len(dataset) != expected:
            raise ValueError(
                f"mosaicml-streaming's `{type(dataset).__name__}` gives this process {len(dataset)} of its "
                f"{dataset.epoch_size} samples, but this job has {num_processes} data-parallel processes "
                f"({expected} each): it was built for another number of processes (it reads `RANK`, `WORLD_SIZE` and "
                "`LOCAL_WORLD_SIZE` when it is built). Build it in every process once they run, e.g. in "
                "`LightningDataModule.setup` under `torchrun`, which sets those variables."
            )

    def before_pass(self, epoch: int) -> None:
        # NOTE: `next_epoch` is the library's public epoch counter (shared memory, so its workers see it).
        self.dataset.next_epoch = epoch

    def check_batches(self, batch_size: int | None, num_workers: int) -> None:
        """Refuse (a ``ValueError``) a loader with workers when the dataset's ``batch_size`` is not this
        process's batch size: its workers would not read the samples in the library's order."""
        own = getattr(self.dataset, "batch_size", None)
        if num_workers > 0 and own != batch_size:
            raise ValueError(
                f"mosaicml-streaming's `{type(self.dataset).__name__}(batch_size={own})` deals its samples to the "
                f"{num_workers} DataLoader workers in blocks of its `batch_size`, but this process's batches hold "
                f"{batch_size}: the samples consumed would not be the first of its order, so no position could be "
                f"resumed. Build it with `batch_size={batch_size}` (the per-process batch size)."
            )

    def save(self, epoch: int, consumed: int) -> dict[str, Any]:
        state = dict(self.dataset.state_dict(num_samples=consumed, from_beginning=True))
        return {**state, "epoch": epoch, _SHUFFLE: bool(self.dataset.shuffle)}

    def check_restore(self, state: dict[str, Any]) -> None:
        saved, now = state.get(_SHUFFLE), bool(self.dataset.shuffle)
        if saved is not None and saved != now:
            raise ValueError(
                f"`state_dict` was saved from a mosaicml-streaming dataset with `shuffle={saved}`, but this one has "
                f"`shuffle={now}`: the library's order depends on it, so the rest of the epoch would repeat some "
                f"samples and skip others. Build the dataset with `shuffle={saved}`, or load a state saved between "
                "epochs."
            )

    def restore(self, state: dict[str, Any], epoch: int, consumed: int) -> None:
        own = {key: value for key, value in state.items() if key != _SHUFFLE}
        self.dataset.load_state_dict({**own, "epoch": epoch, "sample_in_epoch": consumed})


def recognise(dataset: Any) -> MosaicSplit | None:
    """The ``SelfSplit`` of a mosaicml-streaming ``StreamingDataset`` (of its package ``streaming``), else ``None``."""
    if defined_in(dataset, "streaming", ("StreamingDataset",)) is None:
        return None
    return MosaicSplit(dataset, f"is a mosaicml-streaming `{type(dataset).__name__}`")
