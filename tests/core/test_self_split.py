"""Recognising streams that split themselves, in one process (docs/DESIGN.md, "Streams that split
themselves"): each library by its real classes, and what each refuses."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from lightning_shard.loaders.kinds import self_split
from tests.helpers.kinds import stream_kind
from tests.helpers.mosaic import mosaic_dataset, write_mds
from tests.helpers.webdataset_shards import sample_id, write_tars


@pytest.fixture(scope="module")
def tars(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_tars(str(tmp_path_factory.mktemp("webdataset")), [6, 6, 6, 6])


def _pipelines(tars: list[str]) -> dict[str, Any]:
    stages = [wds.SimpleShardList(tars), wds.split_by_node, wds.split_by_worker, wds.tarfile_to_samples()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NOTE: webdataset's own advice on `shardshuffle`
        return {
            "WebDataset": wds.WebDataset(tars, shardshuffle=False, nodesplitter=wds.split_by_node),
            "DataPipeline": wds.DataPipeline(*stages, wds.map(sample_id)),
            "resampled": wds.WebDataset(tars, resampled=True, nodesplitter=wds.split_by_node).with_epoch(8),
            "detshuffle": wds.WebDataset(
                tars, shardshuffle=4, detshuffle=True, seed=5, nodesplitter=wds.split_by_node
            ),
            "unsplit": wds.WebDataset(tars, shardshuffle=False),
        }


def test_webdataset_pipelines_split_by_node_are_recognised(tars: list[str]) -> None:
    pipelines = _pipelines(tars)
    for name in ("WebDataset", "DataPipeline", "detshuffle"):
        split = self_split(pipelines[name])
        assert split is not None and "split by `split_by_node`" in split.reason, name
        assert stream_kind(pipelines[name], "auto", 2).state_name == "self-split-stream"
    assert "over resampled shards" in self_split(pipelines["resampled"]).reason
    assert self_split(pipelines["unsplit"]) is None, "webdataset's own `single_node_only` refuses it"
    with pytest.raises(ValueError, match=r"`iterable_sharding='stride'` on a dataset that is a webdataset"):
        stream_kind(pipelines["WebDataset"], "stride", 2)
    split = self_split(pipelines["WebDataset"])
    assert split.other_count(2, 1).startswith(
        "webdataset's `split_by_node` gives each of 2 processes one shard in 2"
    )
    assert "2th" not in split.other_count(2, 1)


def test_webdataset_detshuffle_follows_the_loaders_epoch(tars: list[str]) -> None:
    dataset = _pipelines(tars)["detshuffle"]
    split = self_split(dataset)
    orders = []
    for epoch in (3, 3, 4, 5, 6, 3):
        split.set_epoch(epoch)
        orders.append([sample["__key__"] for sample in dataset])
    assert orders[0] == orders[1] == orders[5], (
        "the same order for the same epoch, whatever the passes before"
    )
    assert len({tuple(order) for order in orders}) > 1, "other epochs, other orders"


def test_dispatching_a_stream_that_splits_itself_is_refused(tars: list[str], tmp_path: Path) -> None:
    loader = DataLoader(_pipelines(tars)["WebDataset"], batch_size=2)
    with pytest.raises(ValueError, match=r"`dispatch_batches=True` over a dataset that is a webdataset"):
        prepare_data_loader(
            loader, num_processes=2, process_index=0, dispatch_batches=True, put_on_device=True
        )


def test_mosaic_is_recognised_and_refused_when_built_for_another_number_of_processes(tmp_path: Path) -> None:
    dataset = mosaic_dataset(write_mds(str(tmp_path / "ids"), 12, 6), 0, 1, batch_size=2)
    split = self_split(dataset)
    assert split is not None and split.reason == "is a mosaicml-streaming `StreamingDataset`"
    assert split.resumes_itself
    with pytest.raises(ValueError, match=r"gives this process 12 of its 12 samples, but this job has 2"):
        prepare_data_loader(DataLoader(dataset, batch_size=2), num_processes=2, process_index=0)
