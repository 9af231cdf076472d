"""Streaming benchmark (issue 10): 2 processes over an I/O-bound stream, each reading only its share (ours,
native sharding) against every process reading the whole stream and keeping its slice (the reference's
``accelerate.data_loader.IterableDatasetShard``).

The stream has ``--samples`` samples in ``--shards`` equal shards and implements ``n_shards`` /
``shard(num_shards, index)``; reading a sample costs a fixed ``--cost`` seconds (a sleep, paid per
block of 100 samples, as a read of a remote record would be: it occupies no CPU, so the 2 processes of
a 2-core machine do not compete for it). Each step ends with a one-element all-reduce, as a training
step ends with DDP's gradient sync. Each process counts the samples it reads. Both sides run on
the same 2 gloo processes, alternated, each epoch timed from a barrier to the end of the slower
process; the best of ``--repeats`` is reported. The first epoch of each side also checks that every
sample is yielded (the reference also repeats the padding of its last global batch). Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_streaming.py
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, IterableDataset

from lightning_shard import prepare_data_loader

TARGET_SPEEDUP = 1.8
_BLOCK = 100
_READS = [0]
"""Samples this process read (the loaders run without workers, so in this process)."""


class SlowStream(IterableDataset):
    """Samples ``first .. first + length - 1`` in shards; each sample read costs ``cost`` seconds."""

    def __init__(self, bounds: list[tuple[int, int]], cost: float) -> None:
        self.bounds, self.cost = bounds, cost

    @classmethod
    def even(cls, samples: int, shards: int, cost: float) -> SlowStream:
        size = samples // shards
        return cls([(i * size, (i + 1) * size if i < shards - 1 else samples) for i in range(shards)], cost)

    @property
    def n_shards(self) -> int:
        return len(self.bounds)

    def shard(self, num_shards: int, index: int) -> SlowStream:
        size, extra = divmod(len(self.bounds), num_shards)
        start = index * size + min(index, extra)
        return SlowStream(self.bounds[start : start + size + (index < extra)], self.cost)

    def __iter__(self) -> Iterator[int]:
        for low, high in self.bounds:
            for block in range(low, high, _BLOCK):
                end = min(block + _BLOCK, high)
                time.sleep(self.cost * (end - block))
                _READS[0] += end - block
                yield from range(block, end)


def _epoch(loader: Any) -> tuple[float, int, list[int]]:
    """(seconds until the slower process ended, samples this process read, ids it yielded)."""
    dist.barrier()
    _READS[0] = 0
    start = time.perf_counter()
    ids: list[int] = []
    step = torch.ones(1)
    for batch in loader:
        ids.extend(batch.tolist())
        dist.all_reduce(step)  # NOTE: a training step ends with DDP's gradient all-reduce, on both sides.
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed), _READS[0], ids


def worker(rank: int, world_size: int, init_file: str, args: argparse.Namespace, out: Any) -> None:
    from accelerate.data_loader import IterableDatasetShard as ReferenceShard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        stream = SlowStream.even(args.samples, args.shards, args.cost)
        ours = prepare_data_loader(DataLoader(stream, batch_size=args.batch_size))
        reference = ReferenceShard(stream, args.batch_size, num_processes=world_size, process_index=rank)
        theirs = DataLoader(reference, batch_size=args.batch_size)
        sides = {"ours": ours, "theirs": theirs}
        best = {name: (float("inf"), 0) for name in sides}
        covered: dict[str, list[int]] = {}
        for _ in range(args.repeats):
            for name, loader in sides.items():
                seconds, reads, ids = _epoch(loader)
                best[name] = min(best[name], (seconds, reads))
                covered.setdefault(name, sorted(set(ids)))
        out.put((rank, best, covered))
    finally:
        dist.destroy_process_group()


def run(args: argparse.Namespace) -> list[tuple[int, dict[str, Any], dict[str, list[int]]]]:
    context = mp.get_context("spawn")
    out = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        processes = mp.start_processes(
            worker, args=(2, init_file, args, out), nprocs=2, join=False, start_method="spawn"
        )
        # NOTE: read before joining: a result larger than the pipe's buffer blocks its sender until read.
        results = sorted(out.get() for _ in range(2))
        processes.join()
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--cost", type=float, default=100e-6, help="seconds to read one sample")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    results = run(args)
    for name in ("ours", "theirs"):
        union = sorted(set().union(*(set(covered[name]) for _, _, covered in results)))
        if union != list(range(args.samples)):
            raise SystemExit(f"{name}: the processes did not yield every sample of the stream")
    seconds = {name: max(best[name][0] for _, best, _ in results) for name in ("ours", "theirs")}
    reads = {name: [best[name][1] for _, best, _ in results] for name in ("ours", "theirs")}
    speedup = seconds["theirs"] / seconds["ours"]
    print(
        f"stream of {args.samples:,} samples in {args.shards} shards, {args.cost * 1e6:.0f} us per sample read, "
        f"B={args.batch_size}, 2 gloo processes, best of {args.repeats}"
    )
    print("| loader | samples read per process | epoch | throughput |")
    print("|---|---:|---:|---:|")
    for name, label in (("ours", "ours (native shares)"), ("theirs", "reference `IterableDatasetShard`")):
        per_process = ", ".join(f"{count:,}" for count in reads[name])
        rate = args.samples / seconds[name]
        print(f"| {label} | {per_process} | {seconds[name]:.2f} s | {rate:,.0f} samples/s |")
    verdict = "met" if speedup >= TARGET_SPEEDUP else "NOT met"
    print(f"speed-up {speedup:.2f}x (target >= {TARGET_SPEEDUP}x: {verdict})")


if __name__ == "__main__":
    main()
