"""The same-stream check's cost (issues 33 and 41), side by side in one run: what it adds to every batch, and
what a compared batch costs.

(a) Per batch, in one process (CPU time, robust to a loaded machine): one epoch of process 0 of 2 over a
cheap strided stream (``--samples`` ids in dicts with a 16-float feature, nothing to read, so what the
loader adds weighs as much as it can), with the check (the default: compared batches marked, the collate
wrapped, every batch looked at once, each fetch drawing with torch's generator seeded and set back), without
it (the dataset declares ``splits_by_rank = False``: the same code otherwise), and, with ``--against
CHECKOUT``, the release at that checkout (0.4.0: the first batch checked). Sides alternate round after
round, the garbage collector collected before and off during each epoch; medians.
(b) On 2 gloo processes: a ``fingerprint`` of a global batch (paid at each compared batch: the first two, then
doubling intervals), and the agreement's all-reduce at every fetch with and without the digest's two
integers. Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_same_stream.py --against /work/wt-040
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, IterableDataset

from lightning_shard import prepare_data_loader
from lightning_shard.sampling.stream_fingerprint import fingerprint

sys.path.insert(0, str(Path(__file__).parent))
from _timing import alternating  # noqa: E402


class FeatureStream(IterableDataset):
    """``{"id": i, "x": 16 floats}`` for ``i`` in ``0 .. samples - 1``, the same on every process."""

    def __init__(self, samples: int) -> None:
        self.samples = samples
        self.feature = torch.arange(16, dtype=torch.float32)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index in range(self.samples):
            yield {"id": index, "x": self.feature}


class UncheckedFeatureStream(FeatureStream):
    """``FeatureStream`` declaring that every process reads the same stream: the check is off."""

    splits_by_rank = False


def _parts(batch_size: int, repeats: int) -> dict[str, float]:
    """Median microseconds of the check's parts: the fingerprint of a global batch, and the agreement's
    all-reduce of two integers (without the check) and of four (with the digest)."""
    head = list(FeatureStream(2 * batch_size))
    times: dict[str, list[float]] = {"fingerprint": [], "all-reduce 2": [], "all-reduce 4": []}
    for _ in range(repeats):
        start = time.perf_counter()
        fingerprint(head)
        times["fingerprint"].append(time.perf_counter() - start)
        for width in (2, 4):
            values = torch.zeros(width, dtype=torch.int64)
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(values)
            times[f"all-reduce {width}"].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e6 for name, values in times.items()}


def worker(rank: int, world_size: int, init_file: str, args: argparse.Namespace, out: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        out.put((rank, _parts(args.batch_size, args.repeats)))
    finally:
        dist.destroy_process_group()


def per_batch(args: argparse.Namespace) -> dict[str, list[float]]:
    """CPU seconds of one epoch of process 0 of 2 for each side (a), alternating."""
    place = {"num_processes": 2, "process_index": 0, "iterable_sharding": "stride"}
    make = lambda cls: DataLoader(cls(args.samples), batch_size=args.batch_size)  # noqa: E731
    sides = {
        "checked": prepare_data_loader(make(FeatureStream), **place),
        "unchecked": prepare_data_loader(make(UncheckedFeatureStream), **place),
    }
    if args.against:
        from _release import import_release

        release = import_release(args.against, "prepare")
        sides["release"] = release.prepare_data_loader(make(FeatureStream), **place)
    first = [next(iter(loader))["id"].tolist() for loader in sides.values()]
    if any(ids != first[0] for ids in first):
        raise SystemExit(f"the sides yield different first batches: {first}")
    return alternating(
        {name: (lambda loader=loader: deque(loader, maxlen=0)) for name, loader in sides.items()},
        args.repeats,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=64_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--against", help="a checkout of a release (e.g. a worktree of 0.3.0)")
    args = parser.parse_args()
    times = per_batch(args)
    context = mp.get_context("spawn")
    out = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        processes = mp.start_processes(
            worker, args=(2, init_file, args, out), nprocs=2, join=False, start_method="spawn"
        )
        parts = sorted(out.get() for _ in range(2))[0][1]
        processes.join()
    steps = args.samples // (2 * args.batch_size)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"(a) strided stream of {args.samples:,} ids, B={args.batch_size}, process 0 of 2, {steps} batches an "
        f"epoch, CPU time, median of {args.repeats} alternating rounds"
    )
    print("| side | median epoch | per batch | ratio to unchecked |")
    print("|---|---:|---:|---:|")
    for name, median in medians.items():
        ratio = median / medians["unchecked"]
        print(f"| {name} | {median * 1e3:.1f} ms | {median / steps * 1e6:.2f} us | {ratio:.3f}x |")
    print(
        f"(b) 2 gloo processes: fingerprint of a global batch ({2 * args.batch_size} elements) "
        f"{parts['fingerprint']:.0f} us; the agreement's all-reduce of 2 integers {parts['all-reduce 2']:.0f} us, "
        f"of 4 {parts['all-reduce 4']:.0f} us (medians)"
    )


if __name__ == "__main__":
    main()
