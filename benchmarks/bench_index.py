"""Time one process's epoch of indices (docs/DESIGN.md, "Fast index path"): ours vs the reference's ``BatchSamplerShard``.

Both sides shard the same ``BatchSampler`` and produce the same list of index lists (checked); the
time is ``list(shard)`` for ``process_index=0``, best of ``--repeats`` runs, ours and the reference's
alternating so that both see the same machine load. Shuffled runs use a
``RandomSampler`` without generator (the global RNG seeded identically before each run) and a
``SeedableRandomSampler`` (ours vs the reference's, same ``data_seed``); sequential runs a
``SequentialSampler``. ``torch.randperm`` of the whole epoch is printed as the floor of any shuffled
epoch, and turning this process's indices into Python lists as the floor of any epoch.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_index.py            # the table at 10M samples
    OMP_NUM_THREADS=1 python benchmarks/bench_index.py --plot     # time vs size, index_epoch_time.png
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import data_loader as reference
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from lightning_shard import BatchSamplerShard, SeedableRandomSampler

HERE = Path(__file__).resolve().parent
PLOT_SIZES = [1_000_000, 2_000_000, 5_000_000, 10_000_000, 20_000_000, 50_000_000]
SEED = 1234

SHUFFLED, SEEDABLE, SEQUENTIAL = "shuffled (RandomSampler)", "shuffled (SeedableRandomSampler)", "sequential"
TARGETS = {SHUFFLED: 4.0, SEEDABLE: 4.0, SEQUENTIAL: 8.0}


@dataclass(frozen=True)
class Setting:
    samples: int
    num_processes: int
    batch_size: int
    repeats: int


def _sampler(case: str, samples: int, ours: bool) -> Any:
    data = range(samples)
    if case == SEQUENTIAL:
        return SequentialSampler(data)
    if case == SHUFFLED:
        return RandomSampler(data)
    seedable = SeedableRandomSampler if ours else reference.SeedableRandomSampler
    return seedable(data, data_seed=SEED)


def _shard(case: str, setting: Setting, samples: int, ours: bool) -> Any:
    cls = BatchSamplerShard if ours else reference.BatchSamplerShard
    batch_sampler = BatchSampler(_sampler(case, samples, ours), setting.batch_size, drop_last=False)
    return cls(batch_sampler, num_processes=setting.num_processes, process_index=0)


def _time(run: Callable[[], Any], repeats: int) -> float:
    """Best wall time of ``repeats`` calls."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _epoch(shard: Any) -> Callable[[], list[list[int]]]:
    """One epoch of ``list(shard)``, the global RNG seeded the same before each run."""
    sampler = shard.batch_sampler.sampler

    def run() -> list[list[int]]:
        torch.manual_seed(SEED)
        if hasattr(sampler, "set_epoch"):
            # NOTE: the reference's SeedableRandomSampler advances its epoch after every iteration.
            sampler.set_epoch(0)
        return list(shard)

    return run


def compare(case: str, setting: Setting, samples: int) -> tuple[float, float]:
    """Best times of ours and the reference for ``case``, runs alternating so both see the same load.

    Refuses to report when the two yield different batches.
    """
    ours = _epoch(_shard(case, setting, samples, ours=True))
    theirs = _epoch(_shard(case, setting, samples, ours=False))
    if ours() != theirs():
        raise SystemExit(f"{case} at {samples:,} samples: ours and the reference yield different batches")
    best_ours = best_theirs = float("inf")
    for _ in range(setting.repeats):
        best_ours = min(best_ours, _time(ours, 1))
        best_theirs = min(best_theirs, _time(theirs, 1))
    return best_ours, best_theirs


def floors(setting: Setting) -> tuple[float, float]:
    """``torch.randperm`` of the epoch, and building this process's lists of Python ints."""
    randperm = _time(lambda: torch.randperm(setting.samples), setting.repeats)
    rows = setting.samples // (setting.batch_size * setting.num_processes)
    mine = torch.arange(rows * setting.batch_size).view(rows, setting.batch_size)
    listing = _time(mine.tolist, setting.repeats)
    return randperm, listing


def table(setting: Setting) -> str:
    """The side-by-side table at ``setting.samples`` (markdown)."""
    lines = [
        "| case | ours (s) | reference (s) | speed-up | target |",
        "|---|---:|---:|---:|---|",
    ]
    for case, target in TARGETS.items():
        ours, theirs = compare(case, setting, setting.samples)
        ratio = theirs / ours
        verdict = f">= {target:.0f}x, {'met' if ratio >= target else 'MISSED'}"
        lines.append(f"| {case} | {ours:.3f} | {theirs:.3f} | {ratio:.1f}x | {verdict} |")
    randperm, listing = floors(setting)
    lines.append(f"| floor: `torch.randperm({setting.samples:,})` | {randperm:.3f} | | | |")
    lines.append(f"| floor: this process's indices as Python lists (`tolist()`) | {listing:.3f} | | | |")
    return "\n".join(lines)


def plot(setting: Setting, path: Path) -> str:
    """Epoch time vs dataset size for ours and the reference; saves ``path``, returns a markdown table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = {SHUFFLED: "tab:blue", SEQUENTIAL: "tab:green"}
    times: dict[tuple[str, bool], list[float]] = {(c, ours): [] for c in cases for ours in (True, False)}
    floor: list[float] = []
    header = " | ".join(f"{case}: ours / reference (s), speed-up" for case in cases)
    lines = [f"| samples | {header} | `torch.randperm` (s) |", "|---:|" + "---:|" * (len(cases) + 1)]
    for samples in PLOT_SIZES:
        cells = []
        for case in cases:
            ours, theirs = compare(case, setting, samples)
            times[(case, True)].append(ours)
            times[(case, False)].append(theirs)
            cells.append(f"{ours:.3f} / {theirs:.3f}, {theirs / ours:.1f}x")
        floor.append(_time(lambda n=samples: torch.randperm(n), setting.repeats))
        lines.append(f"| {samples:,} | " + " | ".join(cells) + f" | {floor[-1]:.3f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    millions = [samples / 1e6 for samples in PLOT_SIZES]
    for (case, ours), values in times.items():
        who, style = ("ours", "-o") if ours else ("reference", "--s")
        axes.plot(millions, values, style, color=cases[case], label=f"{who}, {case}")
    axes.plot(millions, floor, ":", color="gray", label="floor: torch.randperm")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("dataset size (million samples)")
    axes.set_ylabel("one process's epoch of indices (s)")
    axes.set_title(f"list(BatchSamplerShard): N={setting.num_processes}, B={setting.batch_size}, rank 0")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--num-processes", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, help="best of this many runs (default: 5, or 2 with --plot)")
    parser.add_argument("--plot", action="store_true", help="time vs dataset size, saved as a PNG")
    parser.add_argument("--output", type=Path, default=HERE / "index_epoch_time.png")
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.plot else 5)
    setting = Setting(args.samples, args.num_processes, args.batch_size, repeats)
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, OMP_NUM_THREADS={threads}", end=", ")
    print(f"best of {repeats}")
    print(f"N={setting.num_processes}, B={setting.batch_size}, process_index=0")
    if args.plot:
        print(plot(setting, args.output))
        print(f"saved {args.output}")
    else:
        print(f"{setting.samples:,} samples")
        print(table(setting))


if __name__ == "__main__":
    main()
