"""What keeping a loader's main-process draws apart from the model's costs per batch (issue 25;
docs/DESIGN.md, "Random states on resume").

One epoch of process 0 of 2 over a user's map-style dataset (a ``Dataset`` subclass, so its fetches may draw
and each is kept apart) with ``num_workers=0``: a plain ``DataLoader`` over the same index lists, ours, and
the release at ``--against CHECKOUT`` (0.2: ``git worktree add /work/wt_prev 710fab5``), which draws from
the global generator. Checked equal first, then timed in turns as ``timeit`` does (``_timing.py``)::

    OMP_NUM_THREADS=1 python benchmarks/bench_main_draws.py --against /work/wt_prev
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

import torch
from _per_batch import _from_state
from _release import import_release
from _timing import alternating
from torch.utils.data import DataLoader, Dataset

from lightning_shard import prepare_data_loader


class UserRows(Dataset):
    """Row ``i`` is 8 times the float ``i``: a user's class, so nothing tells that it draws nothing."""

    def __init__(self, samples: int) -> None:
        self.rows = torch.arange(samples, dtype=torch.float32).view(-1, 1).expand(-1, 8).contiguous()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.rows[index]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", required=True)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    release = import_release(args.against, "prepare")
    dataset = UserRows(args.samples)

    def user() -> DataLoader:
        return DataLoader(dataset, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0))

    place = {"num_processes": 2, "process_index": 0}
    starts: dict[str, Any] = {
        "ours": _from_state(prepare_data_loader(user(), **place)),
        "release": _from_state(release.prepare_data_loader(user(), **place)),
    }
    indices = [batch[:, 0].long().tolist() for batch in starts["ours"]()]
    plain = DataLoader(dataset, batch_sampler=indices)
    starts["plain"] = lambda: plain
    expected = list(plain)
    for name, start in starts.items():
        if not all(torch.equal(a, b) for a, b in zip(expected, start(), strict=True)):
            raise SystemExit(f"{name} and a plain DataLoader yield different batches")
    runs = {name: (lambda start=start: [batch for batch in start()]) for name, start in starts.items()}
    times = {name: statistics.median(values) for name, values in alternating(runs, 2 * args.repeats).items()}
    batches = len(indices)
    print(
        f"torch {torch.__version__}, load average {os.getloadavg()[0]:.2f}, {batches} batches of 16, "
        f"median of {2 * args.repeats} alternating runs"
    )
    print("| loader | us/batch | ratio to plain |")
    print("|---|---:|---:|")
    for name in ("plain", "release", "ours"):
        print(f"| {name} | {times[name] / batches * 1e6:.1f} | {times[name] / times['plain']:.3f}x |")
    print(
        f"kept apart, per batch: {(times['ours'] - times['release']) / batches * 1e6:.1f} us (ours - release)"
    )


if __name__ == "__main__":
    main()
