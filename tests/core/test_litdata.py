"""LitData's streaming datasets (the real package), one process looping over every process index
(docs/DESIGN.md, "LitData"): LitData splits by the rank it is given, each sample read once in the job, a
resumed epoch equals the uninterrupted one, another process count refused with LitData's reason.

The datasets are built outside any process group, as at a script's top: LitData detects one process, so
without the rank set at set-up every process would read all of them.
"""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from lightning_shard.loaders.kinds import self_split
from tests.helpers.kinds import stream_kind
from tests.helpers.litdata_ids import IDS, require_litdata, session_ids

litdata = require_litdata()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    return session_ids(tmp_path_factory)


def _ids(loader: Any, steps: int | None = None) -> list[list[int]]:
    seen = []
    for batch in loader:
        seen.append([int(i) for i in batch["id"]])
        if steps is not None and len(seen) == steps:
            break
    return seen


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


def _loader(data: str, streaming: bool, workers: int = 0, batch_size: int = 4, **kwargs: Any) -> DataLoader:
    """A shuffled LitData stream in a plain ``DataLoader`` or LitData's; ``kwargs`` go to the loader."""
    dataset = litdata.StreamingDataset(data, shuffle=True, seed=3)
    make = litdata.StreamingDataLoader if streaming else DataLoader
    # NOTE: forked workers start in milliseconds (the default start method here, said for clarity).
    context = "fork" if workers else None
    return make(
        dataset, batch_size=batch_size, num_workers=workers, multiprocessing_context=context, **kwargs
    )


def _shares(make: Any) -> list[list[int]]:
    return [_flat(_ids(prepare_data_loader(make(), num_processes=2, process_index=rank))) for rank in (0, 1)]


def test_litdata_datasets_are_recognised_and_passed_through(data: str) -> None:
    streaming = litdata.StreamingDataset(data)
    combined = litdata.CombinedStreamingDataset([streaming, litdata.StreamingDataset(data)])
    parallel = litdata.ParallelStreamingDataset([streaming, litdata.StreamingDataset(data)])
    for dataset in (streaming, combined, parallel):
        assert self_split(dataset).reason == f"is a LitData `{type(dataset).__name__}`"
        assert stream_kind(dataset, "auto", 2).state_name == "self-split-stream"
        with pytest.raises(ValueError, match=r"`iterable_sharding='stride'` on a dataset that is a LitData"):
            stream_kind(dataset, "stride", 2)


@pytest.mark.parametrize("streaming", [False, True], ids=["DataLoader", "StreamingDataLoader"])
@pytest.mark.parametrize("workers", [0, 2])
def test_each_sample_is_read_once_in_the_job(data: str, streaming: bool, workers: int) -> None:
    shares = _shares(lambda: _loader(data, streaming, workers))
    assert all(shares) and not set(shares[0]) & set(shares[1]), "disjoint shares, none empty"
    assert sorted(shares[0] + shares[1]) == list(range(IDS)), "every sample once"
    alone = _flat(
        _ids(prepare_data_loader(_loader(data, streaming, workers), num_processes=1, process_index=0))
    )
    assert sorted(alone) == list(range(IDS)), "one process reads all (the rank set back to one process)"


def test_the_loaders_drop_last_trims_the_shares_to_equal_length(data: str) -> None:
    shares = _shares(lambda: _loader(data, streaming=False, drop_last=True))
    assert len(shares[0]) == len(shares[1]) == 24, "LitData drops 2 of 50 to give 2 x 6 batches of 4"


def test_litdatas_own_guesses_differ_by_process_and_are_replaced(
    data: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NOTE: as under Lightning's launcher: the first process builds the dataset before the process group
    # exists (one process, `drop_last` off), the others with `WORLD_SIZE` set (rank 0 of 2, `drop_last` on).
    first = litdata.StreamingDataset(data, shuffle=True, seed=3)
    monkeypatch.setenv("WORLD_SIZE", "2")
    second = litdata.StreamingDataset(data, shuffle=True, seed=3)
    assert (first.drop_last, second.drop_last) == (False, True)
    assert second.distributed_env.global_rank == 0, "the second process thinks it is rank 0 too"
    shares = [
        _flat(
            _ids(
                prepare_data_loader(
                    litdata.StreamingDataLoader(dataset, batch_size=4), num_processes=2, process_index=rank
                )
            )
        )
        for rank, dataset in enumerate((first, second))
    ]
    assert sorted(shares[0] + shares[1]) == list(range(IDS)), "one split, computed alike on both"


def test_combined_and_parallel_datasets_split_every_dataset_they_read(data: str) -> None:
    def combined() -> DataLoader:
        parts = [litdata.StreamingDataset(data), litdata.StreamingDataset(data, shuffle=True, seed=5)]
        return DataLoader(litdata.CombinedStreamingDataset(parts, seed=1), batch_size=4)

    shares = _shares(combined)
    assert sorted(shares[0] + shares[1]) == sorted(list(range(IDS)) * 2), "each dataset's samples once"

    def parallel() -> DataLoader:
        parts = [litdata.StreamingDataset(data), litdata.StreamingDataset(data)]
        return DataLoader(litdata.ParallelStreamingDataset(parts), batch_size=4, collate_fn=_first)

    shares = _shares(parallel)
    assert sorted(shares[0] + shares[1]) == list(range(IDS))


def _first(samples: list[Any]) -> dict[str, list[int]]:
    """The ids of the first dataset of a ``ParallelStreamingDataset``'s tuples."""
    return {"id": [int(pair[0]["id"]) for pair in samples]}


@pytest.mark.parametrize("streaming", [False, True], ids=["DataLoader", "StreamingDataLoader"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_resumed_epoch_equals_the_uninterrupted_one_per_rank(
    data: str, streaming: bool, workers: int
) -> None:
    for rank in (0, 1):
        make = lambda rank=rank: prepare_data_loader(  # noqa: E731
            _loader(data, streaming, workers), num_processes=2, process_index=rank
        )
        full = make()
        full.set_epoch(1)
        expected = _ids(full)
        stopped = make()
        stopped.set_epoch(1)
        head = _ids(stopped, steps=3)
        state = stopped.state_dict()
        resumed = make()
        resumed.load_state_dict(state)
        assert head + _ids(resumed) == expected, f"rank {rank}: the rest of epoch 1, exactly"
        assert _ids(resumed) == _ids(full), "and the next epoch as the uninterrupted run's"


def test_a_mid_epoch_state_of_another_process_count_is_refused_with_litdatas_reason(data: str) -> None:
    stopped = prepare_data_loader(_loader(data, streaming=True), num_processes=2, process_index=0)
    _ids(stopped, steps=2)
    state = stopped.state_dict()
    one = prepare_data_loader(_loader(data, streaming=True), num_processes=1, process_index=0)
    with pytest.raises(
        ValueError, match=r"saved mid-epoch by 2 processes.*LitData assigns its chunks' items"
    ):
        one.load_state_dict(state)
    between = prepare_data_loader(_loader(data, streaming=True), num_processes=2, process_index=0)
    _ids(between)
    one.load_state_dict(between.state_dict())  # NOTE: between epochs it loads on any number.
    assert sorted(_flat(_ids(one))) == list(range(IDS))


def test_the_rank_litdata_splits_by_is_set_on_the_dataset(data: str) -> None:
    dataset = litdata.StreamingDataset(data)
    assert dataset.distributed_env.world_size == 1, "built outside a process group: LitData sees one process"
    prepare_data_loader(DataLoader(dataset, batch_size=4), num_processes=2, process_index=1)
    env = dataset.distributed_env
    assert (env.world_size, env.global_rank, env.num_nodes) == (2, 1, 1)
    assert len(dataset) == IDS // 2, "LitData's own length is now this rank's share"


def test_every_pass_of_an_epoch_reads_the_same_order(data: str) -> None:
    # NOTE: LitData advances its epoch (and so its shuffle) when a pass ends; padding restarts the share.
    share = prepare_data_loader(_loader(data, streaming=False), num_processes=2, process_index=0).dataset
    share.set_epoch(4)
    passes = [[int(sample["id"]) for sample in share] for _ in range(2)]
    assert passes[0] == passes[1] and len(passes[0]) == IDS // 2
