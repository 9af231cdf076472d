"""What the checkpoints of an interrupted fit kept, from the steps its attempts recorded
(``tests/scripts/elastic.py``, ``ElasticRecorder``), checked against the uninterrupted order."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from tests.helpers.lightning_app import RecordMap
from tests.scripts.elastic import BATCH, EPOCHS, HOLD_AT, HOLD_WORLD, LENGTH


def _steps(out: Path) -> list[list[Any]]:
    return [json.loads(line) for path in out.glob("steps-*.jsonl") for line in path.read_text().splitlines()]


def _attempts(steps: list[list[Any]]) -> list[tuple[int, int, int]]:
    """``(attempt, start_step, world)`` of each attempt that trained, in the order they ran."""
    return sorted({(attempt, start, world) for attempt, start, _, world, *_ in steps})


def _kept(steps: list[list[Any]]) -> dict[int, list[int]]:
    """Per epoch, the ids the checkpoints kept, step by step, ranks in order within a step."""
    attempts = _attempts(steps)
    kept: dict[tuple[int, int], list[tuple[int, list[int]]]] = defaultdict(list)
    for index, (attempt, _, _) in enumerate(attempts):
        until = attempts[index + 1][1] if index + 1 < len(attempts) else None
        for other, _, rank, _, epoch, step, ids in steps:
            if other == attempt and (until is None or step <= until):
                kept[epoch, step].append((rank, ids))
    epochs: dict[int, list[int]] = defaultdict(list)
    for (epoch, _), ranks in sorted(kept.items()):
        assert sorted(rank for rank, _ in ranks) == list(range(len(ranks))), "every rank of the step, once"
        epochs[epoch] += [i for _, ids in sorted(ranks) for i in ids]
    return epochs


def _uninterrupted(epoch: int) -> list[int]:
    """The epoch's order as the seedable sampler draws it (the same on any number of processes)."""
    loader = prepare_data_loader(
        DataLoader(RecordMap(LENGTH), batch_size=BATCH, shuffle=True),
        num_processes=1,
        process_index=0,
        use_seedable_sampler=True,
        data_seed=0,
    )
    loader.set_epoch(epoch)
    return [int(i) for batch in loader for i in batch["id"]]


def check_exactly_once(
    out: Path, final_world: int, resumed_from: int = HOLD_AT
) -> list[tuple[int, int, int]]:
    """Every epoch's kept ids: the uninterrupted order, each once, then the padding; the attempts.

    ``resumed_from``: the least step the last attempt restored (the checkpoint of the hold, unless the
    launcher may restore an earlier one).
    """
    steps = _steps(out)
    attempts = _attempts(steps)
    assert attempts[0][2] == HOLD_WORLD and attempts[-1][2] == final_world, attempts
    assert attempts[-1][1] >= resumed_from, "the last attempt resumed from a checkpoint mid-epoch"
    epochs = _kept(steps)
    assert sorted(epochs) == list(range(EPOCHS))
    for epoch, ids in epochs.items():
        order = _uninterrupted(epoch)
        assert ids[:LENGTH] == order, f"epoch {epoch}: the uninterrupted order, each sample once"
        # NOTE: samples repeated to fill the last step (of what was left at a resume, when it was in this epoch).
        padding = ids[LENGTH:]
        assert len(padding) < BATCH * final_world and set(padding) <= set(order)
    return attempts
