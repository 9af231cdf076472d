"""Every released version's loader states stay loadable (docs/DESIGN.md, "Global state"): states written by
0.2.0, 0.3.0 and 0.4.0 mid-epoch on 2 processes, one per kind of data and mode (``tests/data/legacy/``, written by
``tests/scripts/legacy_states.py`` against each release's code), resumed by this code on 2 processes exactly
as the release itself went on, and on 1 process with every id of the epoch read once (or refused, by name,
where the kind's position does not carry over: shares read on another number of processes)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_shard import prepare_data_loader
from tests.helpers.dist import progress, run_distributed
from tests.scripts.legacy_states import CASES, SCALABLE, epoch_ids

pytestmark = pytest.mark.dist

LEGACY = Path(__file__).parents[1] / "data" / "legacy"
RECORDS = {
    path.parent.name + "/" + path.stem: json.loads(path.read_text())
    for path in sorted(LEGACY.glob("*/*.json"))
}
ALL_CASES = {**CASES, SCALABLE[0]: SCALABLE[1]}
BOUND = 180.0
"""Seconds without a finished case after which every process is killed: a case reads an epoch of 24 ids
(well under a second); generous for 2 cores shared with other test runs."""


def resume_all(rank: int, world_size: int) -> dict[str, Any]:
    """Each record's state loaded into this code's loader of the same case; the ids read, or the refusal."""
    results = {}
    for key, record in RECORDS.items():
        make, options = ALL_CASES[record["case"]]
        torch.manual_seed(12345)  # NOTE: unlike the release's run: only the state may carry the order
        loader = prepare_data_loader(make(), **options)
        try:
            loader.load_state_dict(record["state"])
            results[key] = epoch_ids(loader)
        except ValueError as error:
            results[key] = str(error)
        progress(key)
    return results


@pytest.fixture(scope="module")
def on_two() -> list[dict[str, Any]]:
    return run_distributed(resume_all, 2, timeout=BOUND)


@pytest.fixture(scope="module")
def on_one() -> list[dict[str, Any]]:
    return run_distributed(resume_all, 1, timeout=BOUND)


def test_the_records_cover_every_kind_and_mode_of_the_releases() -> None:
    assert {key.split("/")[0] for key in RECORDS} == {"0.2.0", "0.3.0", "0.4.0"}
    assert set(CASES) <= {record["case"] for record in RECORDS.values() if record["version"] == "0.2.0"}
    for version in ("0.3.0", "0.4.0"):
        assert set(ALL_CASES) == {
            record["case"] for record in RECORDS.values() if record["version"] == version
        }


@pytest.mark.parametrize("key", sorted(RECORDS))
def test_a_released_state_resumes_exactly_on_as_many_processes(
    on_two: list[dict[str, Any]], key: str
) -> None:
    for rank, result in enumerate(on_two):
        assert result[key] == RECORDS[key]["rest"][rank], f"{key}, rank {rank}"


SHARES = ("stream_native", "stream_self_split")


@pytest.mark.parametrize("key", sorted(RECORDS))
def test_a_released_state_resumes_on_fewer_processes_or_says_why_not(
    on_one: list[dict[str, Any]], key: str
) -> None:
    record, (result,) = RECORDS[key], on_one
    if record["case"] in SHARES:
        assert "each reading its own share of the stream, but this run has 1" in result[key], result[key]
        return
    read = [i for batch in record["head"][0] + record["head"][1] + result[key] for i in batch]
    counts = Counter(read)
    universe = set(range(24 if record["case"] == "map_uneven" else 23))
    assert set(counts) == universe, f"{key}: ids never read: {sorted(universe - set(counts))}"
    # NOTE: the epoch's last global batch may be completed with ids of its first (under 1 global batch).
    assert len(read) - len(counts) < 6, f"{key}: {len(read) - len(counts)} ids read twice"
