"""Draws the figure of docs/batches.md, "How batches are dealt out": which samples each process gets at
each step, as an SVG. The docs build runs it (docs/hooks.py), so the picture is what the code deals out.

    python docs/batches_figure.py OUT.svg

Every panel but dispatch comes from ``prepare_data_loader`` itself, run here for each process in turn (no
process group is needed); a dispatcher needs a group, so that panel follows its rule (process 0 loads
``N`` batches, completes them to a multiple of ``N`` rows from the epoch's start, and sends each process
its slice), and tests/docs/test_batches_figure.py checks it against a real 2-process run.
"""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader

Deal = list[list[list[int]]]
"""Per process, per step, the sample ids of its batch."""
SAMPLES = 11


def deal(batch_size: int, processes: int, **options: Any) -> Deal:
    """What each of ``processes`` processes reads in an epoch of ``SAMPLES`` samples."""
    return [
        [batch.tolist() for batch in _prepared(batch_size, processes, rank, **options)]
        for rank in range(processes)
    ]


def _prepared(batch_size: int, processes: int, rank: int, **options: Any) -> Any:
    loader = DataLoader(range(SAMPLES), batch_size=batch_size)
    return prepare_data_loader(loader, num_processes=processes, process_index=rank, **options)


def dispatch_deal(batch_size: int, processes: int) -> Deal:
    """``dispatch_batches=True``: process 0 reads ``processes`` batches, completes them to a multiple of
    ``processes`` rows with samples from the epoch's start, and sends each process an equal slice."""
    ids = list(range(SAMPLES))
    global_batch = batch_size * processes
    dealt: Deal = [[] for _ in range(processes)]
    for start in range(0, SAMPLES, global_batch):
        rows = ids[start : start + global_batch]
        rows += ids[: -len(rows) % processes]
        size = len(rows) // processes
        for rank in range(processes):
            dealt[rank].append(rows[rank * size : (rank + 1) * size])
    return dealt


def resumed_deal(before: int, after: int, batch_size: int, steps: int) -> tuple[Deal, Deal]:
    """An epoch read by ``before`` processes for ``steps`` steps, saved, and resumed on ``after``."""
    first = [_prepared(batch_size, before, rank) for rank in range(before)]
    read: Deal = [[next(iterator).tolist() for _ in range(steps)] for iterator in map(iter, first)]
    state = first[0].state_dict()  # NOTE: the same on every process
    rest = []
    for rank in range(after):
        loader = _prepared(batch_size, after, rank)
        loader.load_state_dict(state)
        rest.append([batch.tolist() for batch in loader])
    return read, rest


def panels() -> list[tuple[str, Deal]]:
    """Each panel's title and deal: 11 samples, batches of 4 on 2 processes (the resume: of 2 on 3, then 2)."""
    read, rest = resumed_deal(before=3, after=2, batch_size=2, steps=1)
    return [
        ("shard (the default): whole batches of 4, the last step padded from the epoch's start", deal(4, 2)),
        ("split_batches=True: each batch of 4 split in 2", deal(4, 2, split_batches=True)),
        ("dispatch_batches=True: process 0 reads 2 batches a step and sends each process its half", dispatch_deal(4, 2)),
        (
            'even_batches="balanced": the last step split into real samples, none repeated',
            deal(4, 2, even_batches="balanced"),
        ),
        ("saved after 1 step on 3 processes (batches of 2) ...", read),
        ("... resumed on 2: the rest of the epoch, each sample once, then the padding", rest),
    ]


COLOURS = ("#4C72B0", "#DD8452", "#55A868")
CELL, GAP, ROW, LABEL = 22, 14, 28, 96


def draw() -> str:
    """The figure, as SVG text."""
    parts, y = [], 8
    for title, dealt in panels():
        parts.append(f'<text x="4" y="{y + 14}" font-weight="bold">{escape(title)}</text>')
        y += 24
        padding = repeats(dealt)
        for rank, steps in enumerate(dealt):
            parts.append(f'<text x="4" y="{y + 16}">process {rank}</text>')
            x = LABEL
            for step, batch in enumerate(steps):
                for index, sample in enumerate(batch):
                    parts.append(_cell(x, y, sample, COLOURS[rank], (step, rank, index) in padding))
                    x += CELL
                x += GAP
            y += ROW
        y += 10
    legend = _cell(4, y, 0, COLOURS[0], True).replace(">0<", "><")
    parts.append(
        legend + f'<text x="{4 + CELL + 6}" y="{y + 16}">padding: a sample read a second time</text>'
    )
    height = y + ROW + 4
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="720" height="{height}" viewBox="0 0 720 {height}" '
        'font-family="sans-serif" font-size="13">\n' + "\n".join(parts) + "\n</svg>\n"
    )


def repeats(dealt: Deal) -> set[tuple[int, int, int]]:
    """``(step, process, position)`` of each sample read a second time, in reading order (step by step)."""
    seen: set[int] = set()
    repeated = set()
    for step in range(max(map(len, dealt))):
        for rank, steps in enumerate(dealt):
            for index, sample in enumerate(steps[step] if step < len(steps) else []):
                if sample in seen:
                    repeated.add((step, rank, index))
                seen.add(sample)
    return repeated


def _cell(x: int, y: int, sample: int, colour: str, padded: bool) -> str:
    fill, text, dash = ("white", colour, ' stroke-dasharray="3,2"') if padded else (colour, "white", "")
    return (
        f'<rect x="{x}" y="{y}" width="{CELL - 2}" height="{CELL - 2}" rx="3" fill="{fill}" stroke="{colour}"{dash}/>'
        f'<text x="{x + (CELL - 2) / 2}" y="{y + 15}" text-anchor="middle" fill="{text}">{sample}</text>'
    )


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(draw())
