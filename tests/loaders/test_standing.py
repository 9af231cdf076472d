"""Where an epoch stands, in one vocabulary (docs/DESIGN.md, "Global state"): ``loader.standing()`` counts
steps per process and samples of all processes, whatever the kind of data; the saved ``consumed`` keeps
its own unit (batches of the user's loader, or a stream's elements), unchanged."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from lightning_shard import prepare_data_loader
from tests.helpers.dist import run_distributed

pytestmark = pytest.mark.dist


class Ids(IterableDataset):
    """The ids ``0 .. 39``, the same on every process."""

    def __iter__(self) -> Any:
        return iter(range(40))


def after_three_steps(rank: int, world_size: int) -> dict[str, Any]:
    """For a map-style and a strided loader (batch 2): the standing and the saved ``consumed`` after 3 steps,
    and the standing of a fresh loader given that state."""
    out = {}
    loaders = {
        "map": lambda: DataLoader(list(range(40)), batch_size=2, shuffle=True),
        "stream": lambda: DataLoader(Ids(), batch_size=2),
    }
    for name, make in loaders.items():
        torch.manual_seed(0)
        loader = prepare_data_loader(make(), iterable_sharding="stride")
        batches = iter(loader)
        for _ in range(3):
            next(batches)
        state = loader.state_dict()
        resumed = prepare_data_loader(make(), iterable_sharding="stride")
        resumed.load_state_dict(state)
        out[name] = (loader.standing(), state["consumed"], resumed.standing(), loader.standing(1))
        batches.close()
    return out


def test_the_standing_counts_steps_and_samples_alike_for_every_kind() -> None:
    for by_rank in run_distributed(after_three_steps, 2):
        (map_at, map_consumed, map_resumed, map_one), (stream_at, stream_consumed, stream_resumed, _) = (
            by_rank["map"],
            by_rank["stream"],
        )
        assert (map_consumed, stream_consumed) == (6, 12)  # NOTE: the saved units: user batches, elements
        for at in (map_at, stream_at, map_resumed, stream_resumed):
            assert (at.epoch, at.steps, at.steps_before_resume, at.samples, at.samples_before_resume) == (
                0,
                3,
                0,
                12,
                0,
            )
        assert (map_one.steps, map_one.samples) == (1, 4)
