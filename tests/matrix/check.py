"""The verdict on one cell of the combination matrix, from the ids every rank recorded (docs/DESIGN.md,
"Combination harness").

A cell passes when: its uninterrupted run reads every sample exactly once per epoch across the ranks,
besides the documented end-of-epoch padding (at most once, for an epoch read in part), with a new order
each epoch for a shuffled loader; the killed run's records up to its checkpoint, followed by the
restart's, equal the uninterrupted run's on every rank (on another number of processes, or of workers
of a stream after the resumed epoch, where the order legitimately changes: the same invariant, epoch by
epoch, across the ranks of both runs); and a user's ``DataLoader`` subclass made every batch. A sampler
with replacement (``weighted*``) has no "exactly once": each epoch reads its ``n`` draws (plus the
padding), ids of the dataset only, and the interrupted run's draws equal the uninterrupted run's, rank
by rank on the same number of processes, in the order of the global batches on another. A filtering
sampler's epoch is its subset, exactly once; an id it never yields is a failure. A cell the
rules refuse passes when its fit raised the rule's message (in every record of the error) before
any training step.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from tests.matrix.cells import (
    BATCH,
    MAX_TOKENS,
    REPLACEMENT,
    SHARDS,
    SHARES,
    STREAMS,
    Cell,
    partial_epochs,
    refusal,
    refusal_at_restart,
    sampled_ids,
    shuffles,
)

Records = list[list[dict[str, Any]]]
"""Per rank, the records of each consumed training batch: ``{"epoch", "batch_idx", "a": ids, ...}``."""


def last_checkpoint(run: Path) -> Path | None:
    """The checkpoint holding the most consumed batches (a file the kill truncated is skipped)."""
    best: tuple[int, int, Path] | None = None
    for path in (run / "checkpoints").glob("*.ckpt"):
        reads = _reads_in(path)
        key = (reads or 0, path.stat().st_mtime_ns, path)
        if reads is not None and (best is None or key > best):
            best = key
    return None if best is None else best[2]


def _reads_in(path: Path) -> int | None:
    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["matrix_reads"])
    except Exception:  # noqa: BLE001 - a checkpoint cut short by the kill
        return None


def records(run: Path, world_size: int) -> Records:
    files = [run / f"reads_rank{rank}.jsonl" for rank in range(world_size)]
    return [
        [json.loads(line) for line in file.read_text().splitlines()] if file.exists() else []
        for file in files
    ]


def _errors(run: Path) -> list[str]:
    """What each rank, or the launcher of forked ranks, recorded it raised."""
    return [json.loads(path.read_text())["message"] for path in sorted(run.glob("error_*.json"))]


def universe(cell: Cell) -> set[int]:
    """The ids an epoch reads (``filtering``: the even ones)."""
    if cell.loader in SHARES:
        return set(range(sum(SHARDS)))
    return set(sampled_ids(cell))


def allowance(cell: Cell, devices: int) -> int:
    """How many samples the end-of-epoch padding may repeat: less than one global batch, for a stream
    read by ``DataLoader`` workers less than one per worker (each worker's part ends in its own batch);
    none with ``even_batches=False``, whatever the mode."""
    if not cell.even:
        return 0
    if cell.sampler == "max_tokens" and cell.mode == "shard":
        # NOTE: the last round is completed with whole batches of the epoch's head: fewer than N, each of
        # at most `MAX_TOKENS // 2` ids (the shortest token length is 2).
        return (devices - 1) * (MAX_TOKENS // 2)
    batch = 1 if cell.loader == "unbatched" else BATCH
    global_batch = batch * 2 if cell.mode == "split" else batch * devices
    workers = max(cell.workers, cell.restart_num_workers, 1) if cell.loader in STREAMS else 1
    return (global_batch - 1) * workers


def epoch_problems(cell: Cell, ids: list[int], devices: int, label: str) -> list[str]:
    """What is wrong with the ids all ranks read in one epoch (``[]`` when nothing)."""
    counts = Counter(ids)
    problems = []
    if cell.sampler in REPLACEMENT:
        return _draw_problems(cell, ids, devices, label)
    outside = sorted(set(counts) - universe(cell))
    if outside:
        problems.append(f"{label}: {len(outside)} ids the sampler never yields: {outside[:8]}")
    # NOTE: a map-style epoch read in part that still reached its end (every id read: a short epoch, such
    # as a filtering sampler's, under `limit_train_batches` or an early exit) holds the padding too.
    whole = cell.loader not in STREAMS and universe(cell) <= set(counts)
    if partial_epochs(cell) and not whole:
        repeated = sorted(i for i, count in counts.items() if count > 1)
        if repeated:
            problems.append(f"{label}: ids read twice in an epoch read in part: {repeated[:8]}")
        return problems
    missing = sorted(universe(cell) - set(counts))
    extra = len(ids) - len(counts)
    if missing:
        problems.append(f"{label}: {len(missing)} ids never read: {missing[:8]}")
    if extra > allowance(cell, devices):
        problems.append(
            f"{label}: {extra} repeated reads, more than the padding allows ({allowance(cell, devices)})"
        )
    return problems


def _draw_problems(cell: Cell, ids: list[int], devices: int, label: str) -> list[str]:
    """A sampler with replacement repeats ids by design: every id is one of the dataset's, and an epoch
    reads its ``n`` draws (fewer when read in part) plus at most the padding."""
    problems = []
    outside = sorted(set(ids) - universe(cell))
    draws = len(sampled_ids(cell))
    if outside:
        problems.append(f"{label}: ids outside the dataset: {outside[:8]}")
    if not partial_epochs(cell) and len(ids) < draws:
        problems.append(f"{label}: {len(ids)} reads, fewer than the sampler's {draws} draws")
    if len(ids) > draws + allowance(cell, devices):
        problems.append(
            f"{label}: {len(ids)} reads, more than the {draws} draws and the padding ({allowance(cell, devices)})"
        )
    return problems


def _epoch_ids(runs: list[Records], epoch: int) -> list[int]:
    return [
        i for run in runs for rank in run for record in rank if record["epoch"] == epoch for i in record["a"]
    ]


def _invariant(cell: Cell, runs: list[Records], devices: int, label: str) -> list[str]:
    epochs = sorted({record["epoch"] for run in runs for rank in run for record in rank})
    problems = [
        p for e in epochs for p in epoch_problems(cell, _epoch_ids(runs, e), devices, f"{label} epoch {e}")
    ]
    if not epochs:
        problems.append(f"{label}: no training batch recorded")
    return problems


def _new_orders(cell: Cell, full: Records) -> list[str]:
    if not shuffles(cell) or cell.feature == "reload":
        return []
    for rank, reads in enumerate(full):
        per_epoch = [
            [i for r in reads if r["epoch"] == e for i in r["a"]] for e in sorted({r["epoch"] for r in reads})
        ]
        if len(per_epoch) > 1 and all(epoch == per_epoch[0] for epoch in per_epoch[1:]):
            return [f"uninterrupted run: rank {rank} reads the same ids in every epoch: {per_epoch[0][:8]}"]
    return []


def _marks(cell: Cell, runs: list[Records]) -> list[str]:
    if cell.loader != "subclass":
        return []
    unmarked = sum(1 for run in runs for rank in run for record in rank if record.get("mark") != "ok")
    return (
        [f"{unmarked} batches did not come from the `DataLoader` subclass's `__iter__`"] if unmarked else []
    )


def _comparable(record: dict[str, Any]) -> tuple[Any, ...]:
    return (record["epoch"], record["a"], record.get("b"))


def _exact(full: Records, joined: Records, last_epoch: int | None) -> list[str]:
    """Rank by rank, the interrupted run's reads (to the end of ``last_epoch``, or all) against the full run's."""
    for rank, (want, got) in enumerate(zip(full, joined, strict=True)):
        want_seq = [_comparable(r) for r in want if last_epoch is None or r["epoch"] <= last_epoch]
        got_seq = [_comparable(r) for r in got if last_epoch is None or r["epoch"] <= last_epoch]
        if want_seq != got_seq:
            at = next(
                (i for i, (w, g) in enumerate(zip(want_seq, got_seq, strict=False)) if w != g),
                min(len(want_seq), len(got_seq)),
            )
            return [
                f"rank {rank} differs from the uninterrupted run at batch {at} "
                f"(uninterrupted {want_seq[at : at + 2]}, restarted {got_seq[at : at + 2]}; "
                f"{len(want_seq)} against {len(got_seq)} batches)"
            ]
    return []


def data_problems(cell: Cell, full: Records, prefix: Records, after: Records) -> list[str]:
    """Every difference of the killed + restarted run from what it must read."""
    problems = _invariant(cell, [full], cell.devices, "uninterrupted run") + _new_orders(cell, full)
    problems += _marks(cell, [full, prefix, after])
    if cell.restart_devices == cell.devices:
        joined = [p + a for p, a in zip(prefix, after, strict=True)]
        stream_workers = cell.loader in STREAMS and cell.restart_num_workers != cell.workers
        resumed_epoch = prefix[0][-1]["epoch"] if prefix[0] else 0
        problems += _invariant(cell, [joined], cell.devices, "restarted run")
        problems += _exact(full, joined, resumed_epoch if stream_workers else None)
    else:
        resumed_epoch = prefix[0][-1]["epoch"] if prefix and prefix[0] else 0
        cut = [[r for r in rank if r["epoch"] == resumed_epoch] for rank in prefix]
        problems += _invariant(cell, [cut, after], max(cell.devices, cell.restart_devices), "restarted run")
        if cell.sampler in REPLACEMENT:
            problems += _same_draws(cell, full, prefix, after)
    return problems


def global_order(run: Records, epoch: int) -> list[int]:
    """The ids ``run`` read in ``epoch``, in the order its global batches were drawn: the ranks' k-th
    batches, in rank order, for each k (whole batches dealt ``r, r + N, ...``, or a batch's slices)."""
    per_rank = [[record["a"] for record in rank if record["epoch"] == epoch] for rank in run]
    steps = max(map(len, per_rank), default=0)
    return [i for k in range(steps) for batches in per_rank if k < len(batches) for i in batches[k]]


def _same_draws(cell: Cell, full: Records, prefix: Records, after: Records) -> list[str]:
    """With replacement on another number of processes: each epoch's draws, in order, equal the
    uninterrupted run's (the killed run's then the restart's global batches; the padding after the
    ``n`` draws, and what a partial epoch leaves unread, are not compared)."""
    epochs = sorted({record["epoch"] for run in (full, prefix, after) for rank in run for record in rank})
    for epoch in epochs:
        want = global_order(full, epoch)
        got = global_order(prefix, epoch) + global_order(after, epoch)
        count = min(len(want), len(got), len(sampled_ids(cell)))
        if want[:count] != got[:count] or bool(want) != bool(got):
            at = next((i for i in range(count) if want[i] != got[i]), count)
            return [
                f"epoch {epoch}: the draws differ from the uninterrupted run's at draw {at} "
                f"(uninterrupted {want[at : at + 6]}, restarted {got[at : at + 6]}; {len(want)} against "
                f"{len(got)} reads)"
            ]
    return []


def verdict(cell: Cell, full_dir: Path, cell_dir: Path, errors: dict[str, str | None]) -> dict[str, Any]:
    """``{"cell", "outcome": "passed" | "refused" | "failed", "problems"}`` of one run cell."""
    expected = refusal(cell) or refusal_at_restart(cell, _done_in_resumed_epoch(cell, cell_dir))
    result: dict[str, Any] = {"cell": cell.id, "expected_refusal": expected}
    problems = _refusal_problems(cell, full_dir, cell_dir, errors, expected)
    if problems is None:
        problems = _run_problems(cell, full_dir, cell_dir, errors)
        outcome = "passed" if not problems else "failed"
    else:
        outcome = "refused" if not problems else "failed"
    return {**result, "outcome": outcome, "problems": problems}


def _done_in_resumed_epoch(cell: Cell, cell_dir: Path) -> int:
    """The batches each process had consumed of the epoch its killed run's checkpoint is in (0: none)."""
    saved = last_checkpoint(cell_dir / "kill")
    consumed = 0 if saved is None else _reads_in(saved) or 0
    first = records(cell_dir / "kill", cell.devices)[0][:consumed]
    return sum(1 for record in first if record["epoch"] == first[-1]["epoch"]) if first else 0


def _refusal_problems(
    cell: Cell, full_dir: Path, cell_dir: Path, errors: dict[str, str | None], expected: str | None
) -> list[str] | None:
    """``None`` when the cell is no refusal; else what is wrong with how it was refused (``[]``: nothing)."""
    if expected is None:
        return None
    at_start = errors.get("full") is not None
    run = full_dir if at_start else cell_dir / "restart"
    devices = cell.devices if at_start else cell.restart_devices
    if errors.get("full" if at_start else "restart") is None:
        return [f"expected a refusal containing {expected!r}; the fit ran"]
    # NOTE: the ranks forked by one launcher end together: the first rank that raises has the others
    # terminated, and only the launcher records it (with that rank's message). Every record must hold it.
    messages = _errors(run)
    problems = []
    if not messages or not all(expected in message for message in messages):
        problems.append(
            f"expected the ranks ({devices}) to raise {expected!r}; they raised: {messages or errors}"
        )
    if any(records(run, devices)):
        problems.append("a rank trained before the refusal")
    return problems


def _run_problems(cell: Cell, full_dir: Path, cell_dir: Path, errors: dict[str, str | None]) -> list[str]:
    if errors.get("full"):
        return [f"the uninterrupted run raised: {errors['full'][-1500:]}"]
    if errors.get("kill") is None:
        return ["harness: the kill never fired (the killed fit ran to its end)"]
    if errors.get("restart"):
        return [f"the restart raised: {errors['restart'][-1500:]}"]
    saved = last_checkpoint(cell_dir / "kill")
    consumed = 0 if saved is None else _reads_in(saved) or 0
    full = records(full_dir, cell.devices)
    prefix = [rank[:consumed] for rank in records(cell_dir / "kill", cell.devices)]
    after = records(cell_dir / "restart", cell.restart_devices)
    return data_problems(cell, full, prefix, after)
