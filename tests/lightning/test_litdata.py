"""Real 2-process ``lightning.Trainer`` fits over real LitData streams (docs/DESIGN.md, "LitData"): each
sample read once per epoch in the job, uneven shares padded or stopped, no hang, exact validation and
predict, and a mid-epoch checkpoint (2 workers per process) resumed exactly.

The data (ids 0-49 in chunks of 8) is written once with ``litdata.optimize``; each scenario of
``tests/scripts/litdata_fits.py`` runs once per module, and the tests read what every process recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_app import read_records
from tests.helpers.litdata_ids import IDS, require_litdata, session_ids
from tests.helpers.runner import run_command, script

pytestmark = pytest.mark.lightning

require_litdata()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    return session_ids(tmp_path_factory)


def _scenario(tmp_path_factory: pytest.TempPathFactory, data: str, name: str) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp(f"litdata_{name}")
    return out, run_command(script("litdata_fits", name, data, str(out)), timeout=300)


@pytest.fixture(scope="module")
def fits(tmp_path_factory: pytest.TempPathFactory, data: str) -> tuple[Path, str]:
    return _scenario(tmp_path_factory, data, "fits")


def _train(out: Path) -> list[list[list[int]]]:
    return [[ids for _, _, ids in rank["train"]] for rank in read_records(out, "fit", 2)]


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


def test_a_plain_dataloader_reads_each_sample_once(fits: tuple[Path, str]) -> None:
    first, second = _train(fits[0] / "plain")
    assert len(first) == len(second), "both processes take the same steps"
    assert sorted(_flat(first) + _flat(second)) == list(range(IDS)), "each sample once in the job"
    assert "stream: split by rank by the dataset itself (passed through)" in fits[1]


def test_litdatas_loader_pads_the_shorter_share_from_its_start(fits: tuple[Path, str]) -> None:
    out, output = fits
    first, second = _train(out / "streaming")
    assert len(first) == len(second) == 7
    # NOTE: LitData gives rank 0 six batches of 4 (24 ids) and rank 1 the rest (26 ids, 7 batches).
    assert sorted(_flat(first[:6]) + _flat(second)) == list(range(IDS)), "each sample once, then padding"
    assert first[6] == first[0], "rank 0 pads from the start of its own share"
    assert "50 samples read (rank 0: 24, rank 1: 26), 4 padded by restarting shares" in output


def test_even_batches_false_stops_every_process_at_the_shortest_share(fits: tuple[Path, str]) -> None:
    out, output = fits
    first, second = _train(out / "shortest")
    assert len(first) == len(second) == 6
    seen = _flat(first) + _flat(second)
    assert len(set(seen)) == len(seen) == 48
    assert "2 samples of the other processes' shares were left unseen" in output


def test_a_combined_dataset_reads_each_dataset_once(fits: tuple[Path, str]) -> None:
    first, second = _train(fits[0] / "combined")
    assert sorted(_flat(first) + _flat(second)) == sorted(list(range(IDS)) * 2)


def test_validation_gathers_every_sample_once(fits: tuple[Path, str]) -> None:
    records = read_records(fits[0] / "plain", "fit", 2)
    for rank in records:
        assert sorted(_flat(rank["val"])) == list(range(IDS)), "rank 0's padding batch is dropped"
    local = [len(ids) for rank in records for ids in rank["val_local"]]
    assert sum(local) > IDS, "rank 0 did pad (LitData gave it 24 ids, rank 1 26)"


def test_predict_returns_every_sample_once_in_order_on_rank_0(fits: tuple[Path, str]) -> None:
    out = fits[0]
    assert json.loads((out / "predict_rank0.json").read_text()) == list(range(IDS))
    assert json.loads((out / "predict_rank1.json").read_text()) == list(range(24, IDS)), (
        "rank 1 keeps its part"
    )


@pytest.mark.long
def test_a_mid_epoch_checkpoint_resumes_exactly_with_workers(
    tmp_path_factory: pytest.TempPathFactory, data: str
) -> None:
    out, output = _scenario(tmp_path_factory, data, "resume")
    runs: dict[str, list[Any]] = {
        run: [rank["train"] for rank in read_records(out / run, "fit", 2)]
        for run in ("full", "stop", "resume")
    }
    stop = 5  # NOTE: `tests/scripts/litdata_fits.py::STOP`
    for rank in (0, 1):
        assert runs["full"][rank][:stop] == runs["stop"][rank]
        assert runs["full"][rank][stop:] == runs["resume"][rank], (
            "shuffle, workers and padding restored exactly"
        )
    epochs = [[ids for epoch, _, ids in runs["full"][0] if epoch == e] for e in (0, 1)]
    assert epochs[0] != epochs[1], "LitData reshuffles each epoch"
    assert "Restored all states" in output
