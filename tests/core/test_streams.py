"""Streams in one process (docs/DESIGN.md, "Streaming data"): which streams are read natively, what each
process and ``DataLoader`` worker reads of them, what is refused, and the state they save.

Each test builds the loader of every ``process_index`` in turn without a process group (so no end
agreement runs; ``tests/loaders/test_streams.py`` runs real groups), and compares what the processes
read with the dataset: every sample read once in the whole job.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from lightning_shard import IterableDatasetShard, prepare_data_loader
from lightning_shard.loaders.kinds import self_split
from lightning_shard.loaders.shard import DataLoaderShard
from lightning_shard.loaders.state import LoaderState
from lightning_shard.sampling.native_stream import NativeStreamShard, StreamShardingWarning
from tests.helpers.datasets import IdShardsStream, IdStream, RankSplitIdStream, id_shards
from tests.helpers.hf import hf_id_stream
from tests.helpers.kinds import stream_kind

LENGTHS = [10, 3, 17, 1, 9]
"""Five shards of different lengths: on 2 processes, process 0 gets 30 ids and process 1 gets 10."""


def _ids(loader: Any) -> list[int]:
    return [int(i) for batch in loader for i in (batch["id"] if isinstance(batch, dict) else batch)]


def test_choice_of_sharding() -> None:
    shardable = IdShardsStream(id_shards(LENGTHS))
    assert stream_kind(shardable, "auto", 2).state_name == "native-stream"
    assert stream_kind(shardable, "auto", 5).state_name == "native-stream"
    assert stream_kind(shardable, "stride", 2).state_name == "iterable"
    assert stream_kind(shardable, "auto", 1).state_name == "iterable", "one process: nothing to split"
    fewer = stream_kind(shardable, "auto", 6)
    assert (fewer.state_name, fewer.reason) == ("iterable", "it has 5 shards for 6 processes")
    plain = stream_kind(IdStream(8), "auto", 2)
    assert plain.state_name == "iterable" and "does not implement `n_shards`" in plain.reason
    assert stream_kind(hf_id_stream(LENGTHS), "auto", 2).state_name == "native-stream"
    assert stream_kind(hf_id_stream([40]), "auto", 2).state_name == "iterable"


def test_native_refused_where_it_cannot_apply() -> None:
    with pytest.raises(ValueError, match=r"it has 5 shards for 6 processes.*iterable_sharding='auto'"):
        stream_kind(IdShardsStream(id_shards(LENGTHS)), "native", 6)
    with pytest.raises(TypeError, match=r"`iterable_sharding='native'`.*does not implement `n_shards`"):
        stream_kind(IdStream(8), "native", 2)
    with pytest.raises(ValueError, match=r"`iterable_sharding='stride'`.*1/2 of its own 1/2"):
        stream_kind(RankSplitIdStream(id_shards(LENGTHS)), "stride", 2)
    with pytest.raises(ValueError, match=r"`iterable_sharding` must be one of"):
        prepare_data_loader(DataLoader(IdStream(8)), iterable_sharding="natively")


def test_stream_kinds_and_ends_are_checked() -> None:
    """A share is built with the kind its state records (0.2's "native" is refused, not read as "self"), and
    "same" (all must end together) is a strided stream's policy only."""
    shardable = IdShardsStream(id_shards(LENGTHS))
    assert NativeStreamShard(shardable, "native-stream", 2, 1).share is not shardable
    with pytest.raises(
        ValueError, match=r"`kind` must be 'native-stream' or 'self-split-stream', got 'native'"
    ):
        NativeStreamShard(shardable, "native", 2, 0)
    with pytest.raises(
        ValueError,
        match=r"`stream_ends` must be one of \['pad', 'shortest', 'own'\] for this stream, got 'same'",
    ):
        DataLoaderShard(NativeStreamShard(shardable, "native-stream", 2, 0), stream_ends="same")
    with pytest.raises(
        ValueError,
        match=r"`stream_ends` must be one of \['shortest', 'own', 'same'\] for this stream, got 'pad'",
    ):
        DataLoaderShard(IterableDatasetShard(IdStream(8), batch_size=2), stream_ends="pad")
    strided = prepare_data_loader(DataLoader(IdStream(8), batch_size=2), num_processes=2, process_index=0)
    stream = strided.stream
    assert stream is not None and (stream.stream_ends, stream.uneven) == ("same", False)
    # NOTE: built directly, a loader takes its stream's kind's policy (`stream_ends_for`), as `prepare` does.
    for dataset, ends in (
        (IterableDatasetShard(IdStream(8), batch_size=2), "same"),
        (NativeStreamShard(shardable, "native-stream", 2, 0), "pad"),
    ):
        stream = DataLoaderShard(
            dataset, batch_size=2 if isinstance(dataset, NativeStreamShard) else None
        ).stream
        assert stream is not None and stream.stream_ends == ends and stream.even_batches
    uneven = prepare_data_loader(
        DataLoader(IdShardsStream(id_shards(LENGTHS)), batch_size=2),
        num_processes=2,
        process_index=0,
        even_batches=False,
    )
    assert (
        uneven.stream is not None
        and uneven.stream.stream_ends == "shortest"
        and not uneven.sharding.even_batches
    )


class _ListShards(IdShardsStream):
    """A shardable stream whose ``shard`` returns something workers cannot split again."""

    def shard(self, num_shards: int, index: int) -> Any:
        return list(super().shard(num_shards, index))


def test_workers_need_a_share_they_can_split() -> None:
    loader = DataLoader(_ListShards(id_shards(LENGTHS)), batch_size=2, num_workers=2)
    with pytest.raises(TypeError, match=r"returned a list.*`num_workers=0`"):
        prepare_data_loader(loader, num_processes=2, process_index=0)


def test_datasets_that_split_themselves_are_recognised() -> None:
    from datasets.distributed import split_dataset_by_node

    assert self_split(RankSplitIdStream([[0]])).reason == "declares `splits_by_rank = True`"
    split = split_dataset_by_node(hf_id_stream(LENGTHS), rank=0, world_size=2)
    assert "split_dataset_by_node" in self_split(split).reason
    assert self_split(hf_id_stream(LENGTHS)) is None
    # NOTE: LitData's classes, the real ones: `tests/core/test_litdata.py`.
    assert stream_kind(split, "auto", 2).state_name == "self-split-stream"
    expected = _ids(DataLoader(split, batch_size=4))
    loader = prepare_data_loader(DataLoader(split, batch_size=4), num_processes=2, process_index=0)
    assert _ids(loader) == expected == list(range(0, 40, 2)), "passed through, not split again"


@pytest.mark.parametrize("workers", [0, 2])
def test_each_sample_is_read_once_in_the_job(tmp_path: Path, workers: int) -> None:
    log = tmp_path / "reads.txt"
    dataset = IdShardsStream(id_shards(LENGTHS), log=str(log))
    per_process = []
    for rank in (0, 1):
        loader = prepare_data_loader(
            DataLoader(dataset, batch_size=4, num_workers=workers), num_processes=2, process_index=rank
        )
        per_process.append(_ids(loader))
    assert sorted(per_process[0]) == list(range(30)) and sorted(per_process[1]) == list(range(30, 40))
    reads = Counter(int(line) for line in log.read_text().split())
    assert reads == Counter(range(40)), "every sample read exactly once, by one process and one worker"


@pytest.mark.parametrize("workers", [0, 2])
def test_hugging_face_shares(workers: int) -> None:
    dataset = hf_id_stream(LENGTHS)
    shares = [
        _ids(
            prepare_data_loader(
                DataLoader(dataset, batch_size=4, num_workers=workers), num_processes=2, process_index=r
            )
        )
        for r in (0, 1)
    ]
    assert sorted(shares[0]) == list(range(30)) and sorted(shares[1]) == list(range(30, 40))


def test_fallback_is_said_once_on_rank_0() -> None:
    for rank in (0, 1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            prepare_data_loader(DataLoader(IdStream(8), batch_size=2), num_processes=2, process_index=rank)
            prepare_data_loader(
                DataLoader(IdStream(8), batch_size=2),
                num_processes=2,
                process_index=rank,
                iterable_sharding="stride",
            )
        said = [w for w in caught if issubclass(w.category, StreamShardingWarning)]
        assert len(said) == (1 if rank == 0 else 0)
        if said:
            assert "does not implement `n_shards`" in str(said[0].message)


def test_strided_even_batches_false_counts_the_shortest() -> None:
    # 9 ids, 2 processes of batch 2: global batches of 4; the last one holds only id 8 (process 0's).
    loaders = [
        prepare_data_loader(
            DataLoader(IdStream(9), batch_size=2), num_processes=2, process_index=r, even_batches=False
        )
        for r in (0, 1)
    ]
    assert [len(loader) for loader in loaders] == [2, 2], "all stop at the shortest (process 1's)"
    # NOTE: without a process group nothing stops process 0 early; tests/loaders/test_streams.py runs one.


def test_native_state_round_trip_and_refusals() -> None:
    dataset = IdShardsStream(id_shards(LENGTHS))
    loader = prepare_data_loader(DataLoader(dataset, batch_size=4), num_processes=2, process_index=1)
    iterator = iter(loader)
    [next(iterator) for _ in range(2)]
    state = loader.state_dict()
    assert (state["sampler"], state["steps"], state["streams"]) == ("native-stream", 2, []), (
        "no process's end: each finds its own again on resume"
    )
    again = prepare_data_loader(DataLoader(dataset, batch_size=4), num_processes=2, process_index=1)
    again.load_state_dict(state)
    assert again.state_dict() == state
    assert _ids(again) == list(range(38, 40)), "continues after the 2 batches consumed"
    on_three = prepare_data_loader(DataLoader(dataset, batch_size=4), num_processes=3, process_index=0)
    with pytest.raises(ValueError, match=r"saved mid-epoch by 2 processes.*this run has 3.*on 2 processes"):
        on_three.load_state_dict(state)
    strided = prepare_data_loader(
        DataLoader(dataset, batch_size=4), num_processes=2, process_index=1, iterable_sharding="stride"
    )
    with pytest.raises(ValueError, match=r"'native-stream'.*'iterable'.*`iterable_sharding`"):
        strided.load_state_dict(state)
    between_epochs = {**state, "steps": 0, "consumed": 0, "streams": [{"ended_at": None}] * 2}
    on_three.load_state_dict(between_epochs)  # NOTE: a state between epochs loads on any number
    with pytest.raises(ValueError, match=r"`state_dict\['streams'\]`"):
        LoaderState.from_dict({**state, "streams": [{"ended_at": -1}]})
