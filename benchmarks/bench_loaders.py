"""Loader benchmarks (issues 3, 9): per-batch overhead, dispatch throughput, time to first batch on resume.

(a) ``DataLoaderShard`` against a plain ``DataLoader`` that reads exactly the same batches of the same
    process: over the same ``BatchSamplerShard`` (the price of our loader per batch), and over a
    precomputed list of index lists (that price plus computing the epoch's indices).
(b) Dispatch on 2 gloo processes: ours against the reference's ``DataLoaderDispatcher`` (both from
    their ``prepare_data_loader(..., dispatch_batches=True)``), same outputs checked.
(c) Resuming at 90 % of a shuffled epoch: ours (``load_state_dict`` then ``next(iter(...))``)
    against the reference's ``skip_first_batches`` then ``next(iter(...))``, same first batch checked.
(d) The same onto another number of processes (saved by 8, resumed on 6): ours loads the 8 processes'
    state; the reference cannot, so it is timed skipping to 90 % of its 6-process epoch. Checked: our
    first batch holds no sample consumed before the checkpoint.
(e) With ``--against CHECKOUT`` (issue 18): the per-batch path, one epoch of process 0 through a plain
    ``DataLoader`` over the same batches, ours, the release checked out at ``CHECKOUT`` (0.1: ``git worktree
    add /work/wt01 6c385d5``, outside this repository) and the reference's ``DataLoaderShard``, with
    ``device=None`` and with ``device="cpu"`` (``_per_batch.py``).

Every comparison first checks that both sides yield the same batches, then alternates them and reports
the median of ``--repeats`` runs (twice as many for (a) and (e)), each timed as ``timeit`` does: the garbage
collector collected before and disabled during the run (``_timing.py``). CPU time for the single-process
(a), (c), (d) and (e), wall time of the slower process for (b). Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_loaders.py
    OMP_NUM_THREADS=1 python benchmarks/bench_loaders.py --against /work/wt01 --only-against --repeats 15
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from _datasets import Indices, rows, shuffled_rows
from _per_batch import against_release
from _processes import on_processes
from _timing import alternate, alternating
from torch.utils.data import DataLoader, Dataset

from lightning_shard import BatchSamplerShard, prepare_data_loader

TARGET_OVERHEAD = 1.05
TARGET_DISPATCH = 1.5
TARGET_RESUME = 1 / 3


# -- (a) per-batch overhead -------------------------------------------------------------------------
def overhead(samples: int, batch_size: int, num_processes: int, repeats: int) -> dict[str, float]:
    """One epoch of process 0: ours against two plain DataLoaders yielding the same batches.

    ``shard``: a plain ``DataLoader`` over the same ``BatchSamplerShard`` (what ``DataLoaderShard``
    adds: the cursor, the look-ahead, the state). ``lists``: a plain ``DataLoader`` over this process's
    index lists, computed beforehand (what it adds on top: computing the epoch's indices).
    """
    dataset = rows(samples)
    user = shuffled_rows(dataset, batch_size)
    ours = prepare_data_loader(user(), num_processes=num_processes, process_index=0)
    state = ours.state_dict()
    plain_user = user()
    shard = DataLoader(
        dataset,
        batch_sampler=BatchSamplerShard(plain_user.batch_sampler, num_processes, 0),
        generator=plain_user.generator,
    )

    def run_ours() -> list[torch.Tensor]:
        ours.load_state_dict(state)  # NOTE: the same epoch every run.
        return [batch[0] for batch in ours]

    def run_shard() -> list[torch.Tensor]:
        shard.generator.manual_seed(0)
        return [batch[0] for batch in shard]

    batches = [batch[:, 0].long().tolist() for batch in run_ours()]
    lists = DataLoader(dataset, batch_sampler=batches)

    def run_lists() -> list[torch.Tensor]:
        return [batch[0] for batch in lists]

    reference = run_ours()
    for run in (run_shard, run_lists):
        if not all(torch.equal(a, b) for a, b in zip(reference, run(), strict=True)):
            raise SystemExit("(a): ours and a plain DataLoader yield different batches")
    times = alternating({"ours": run_ours, "shard": run_shard, "lists": run_lists}, repeats)
    return {**{name: statistics.median(values) for name, values in times.items()}, "batches": len(batches)}


# -- (b) dispatch throughput ------------------------------------------------------------------------
class Images(Dataset):
    """``{"x": 3x64x64 float32, "y": int}`` samples read from a preallocated pool."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.pool = torch.randn(64, 3, 64, 64, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": self.pool[index % 64] + index, "y": index}


def _reference_state(rank: int, world_size: int) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size)
    )
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    from accelerate import Accelerator

    Accelerator(cpu=True)


def _dispatch_epoch(loader: Any) -> tuple[float, list[float]]:
    import torch.distributed as dist

    dist.barrier()
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        sums = [float(batch["x"].sum()) + float(batch["y"].sum()) for batch in loader]
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    finally:
        gc.enable()
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # NOTE: an epoch lasts until its slowest process ends.
    return float(elapsed), sums


def dispatch_worker(
    rank: int, world_size: int, samples: int, batch_size: int, repeats: int
) -> dict[str, Any]:
    from accelerate.data_loader import prepare_data_loader as reference_prepare

    _reference_state(rank, world_size)
    kwargs = {"dispatch_batches": True, "put_on_device": True, "device": torch.device("cpu")}
    ours = prepare_data_loader(DataLoader(Images(samples), batch_size=batch_size), **kwargs)
    theirs = reference_prepare(DataLoader(Images(samples), batch_size=batch_size), **kwargs)
    same = _dispatch_epoch(ours)[1] == _dispatch_epoch(theirs)[1]
    times: dict[str, list[float]] = {"ours": [], "theirs": []}
    for _ in range(repeats):
        times["ours"].append(_dispatch_epoch(ours)[0])
        times["theirs"].append(_dispatch_epoch(theirs)[0])
    return {
        **{name: statistics.median(values) for name, values in times.items()},
        "same": same,
        "received": ours.bytes_received,
    }


def dispatch(samples: int, batch_size: int, repeats: int) -> dict[str, Any]:
    results = on_processes(dispatch_worker, 2, samples, batch_size, repeats)
    if not all(result["same"] for result in results):
        raise SystemExit("(b): ours and the reference dispatch different batches")
    return {**results[0], "received": results[1]["received"]}


# -- (c) time to first batch on resume ---------------------------------------------------------------
def _shuffled(samples: int, batch_size: int) -> Callable[[], DataLoader]:
    """A user's shuffled loader over ``samples`` ids, the same order every time it is built."""

    def user() -> DataLoader:
        generator = torch.Generator().manual_seed(0)
        return DataLoader(Indices(samples), batch_size=batch_size, shuffle=True, generator=generator)

    return user


def _first_batch_after(
    state: dict[str, Any], fresh: Any, theirs: Any, skip: int
) -> tuple[Callable[[], Any], ...]:
    """The two resumes timed side by side: ours loads ``state``, the reference skips ``skip`` batches."""
    from accelerate.data_loader import skip_first_batches as reference_skip

    def run_ours() -> Any:
        fresh.load_state_dict(state)
        return next(iter(fresh))

    def run_theirs() -> Any:
        theirs.batch_sampler.batch_sampler.sampler.generator.manual_seed(0)  # NOTE: the same epoch every run.
        return next(iter(reference_skip(theirs, skip)))

    return run_ours, run_theirs


def resume(samples: int, batch_size: int, num_processes: int, repeats: int) -> tuple[float, float, int]:
    """First batch after 90 % of process 0's epoch: ours (state) vs the reference (skip_first_batches)."""
    from accelerate.data_loader import prepare_data_loader as reference_prepare

    user = _shuffled(samples, batch_size)
    ours = prepare_data_loader(user(), num_processes=num_processes, process_index=0)
    skip = int(0.9 * len(ours))
    iter(ours)  # NOTE: begins the epoch (records the generator); state_dict(steps=...) then says where.
    state = ours.state_dict(steps=skip)
    fresh = prepare_data_loader(user(), num_processes=num_processes, process_index=0)
    theirs = reference_prepare(user(), num_processes=num_processes, process_index=0)
    run_ours, run_theirs = _first_batch_after(state, fresh, theirs, skip)
    if not torch.equal(run_ours(), run_theirs()):
        raise SystemExit("(c): ours and the reference resume at different batches")
    median_ours, median_theirs = alternate(run_ours, run_theirs, repeats)
    return median_ours, median_theirs, skip


def resume_elsewhere(
    samples: int, batch_size: int, saved: int, now: int, repeats: int
) -> tuple[float, float, int]:
    """First batch after resuming at 90 % of a shuffled epoch saved by ``saved`` processes, on ``now``.

    Ours loads the state (the ``saved`` processes' position) into a loader for ``now`` processes; the
    reference has no such resume, so its nearest equivalent is ``skip_first_batches`` of a loader for
    ``now`` processes at the same 90 %.
    """
    from accelerate.data_loader import prepare_data_loader as reference_prepare

    user = _shuffled(samples, batch_size)
    stopped = prepare_data_loader(user(), num_processes=saved, process_index=0)
    iter(stopped)
    state = stopped.state_dict(steps=int(0.9 * len(stopped)))
    fresh = prepare_data_loader(user(), num_processes=now, process_index=0)
    theirs = reference_prepare(user(), num_processes=now, process_index=0)
    run_ours, run_theirs = _first_batch_after(state, fresh, theirs, int(0.9 * len(theirs)))
    consumed = {int(i) for rank in range(saved) for i in _first_batches(user, saved, rank, state["steps"])}
    if set(run_ours().tolist()) & consumed:
        raise SystemExit("(d): the resumed batch repeats a sample consumed before the checkpoint")
    median_ours, median_theirs = alternate(run_ours, run_theirs, repeats)
    return median_ours, median_theirs, state["consumed"] * batch_size


def _first_batches(user: Callable[[], DataLoader], num_processes: int, rank: int, steps: int) -> list[int]:
    """The samples process ``rank`` of ``num_processes`` consumed in its first ``steps`` batches.

    NOTE: through the loader itself: starting its iterator draws from the shared generator first.
    """
    loader = prepare_data_loader(user(), num_processes=num_processes, process_index=rank)
    return [int(index) for batch in itertools.islice(iter(loader), steps) for index in batch]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--overhead-samples", type=int, default=200_000)
    parser.add_argument("--dispatch-batches", type=int, default=100, help="global batches per epoch in (b)")
    parser.add_argument("--resume-samples", type=int, default=10_000_000)
    parser.add_argument(
        "--against",
        metavar="CHECKOUT",
        help="(e): also time the per-batch path of the release checked out there",
    )
    parser.add_argument("--only-against", action="store_true", help="run (e) only")
    parser.add_argument("--against-samples", type=int, default=200_000, help="samples of (e)'s epoch")
    args = parser.parse_args()
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, OMP_NUM_THREADS={threads}, load average "
        f"{os.getloadavg()[0]:.2f}, median of {args.repeats} alternating runs (twice as many for (a) and (e)), "
        "gc collected before and disabled during each"
    )
    if args.against is not None:
        against_release(args.against, args.against_samples, 2 * args.repeats)
        print(f"load average after (e): {os.getloadavg()[0]:.2f}\n")
    if args.only_against:
        return
    print("| benchmark | ours | baseline | ratio | target |")
    print("|---|---:|---:|---:|---|")

    timing = overhead(args.overhead_samples, 16, 2, 2 * args.repeats)
    batches = int(timing["batches"])
    for name, what in (
        ("shard", "over the same BatchSamplerShard"),
        ("lists", "over precomputed index lists"),
    ):
        ratio = timing["ours"] / timing[name]
        print(
            f"| (a) epoch of process 0, {args.overhead_samples:,} samples, B=16, N=2 ({batches:,} batches): "
            f"DataLoaderShard vs plain DataLoader {what} | {timing['ours']:.3f} s "
            f"({timing['ours'] / batches * 1e6:.1f} us/batch) | {timing[name]:.3f} s "
            f"({timing[name] / batches * 1e6:.1f} us/batch) | {ratio:.3f}x | "
            f"<= {TARGET_OVERHEAD}x, {'met' if ratio <= TARGET_OVERHEAD else 'MISSED'} |",
            flush=True,
        )

    samples = args.dispatch_batches * 32 * 2
    result = dispatch(samples, 32, args.repeats)
    speedup = result["theirs"] / result["ours"]
    print(
        f"| (b) dispatch, 2 gloo processes, {samples:,} samples of 3x64x64 float32 + int, B=32 "
        f"({args.dispatch_batches} global batches): ours vs reference DataLoaderDispatcher | "
        f"{args.dispatch_batches / result['ours']:.1f} batches/s | {args.dispatch_batches / result['theirs']:.1f} "
        f"batches/s | {speedup:.2f}x | >= {TARGET_DISPATCH}x, {'met' if speedup >= TARGET_DISPATCH else 'MISSED'} |",
        flush=True,
    )
    per_batch = result["received"] / (args.dispatch_batches * (args.repeats + 1))
    global_batch = 2 * 32 * (3 * 64 * 64 * 4 + 8)
    print(
        f"| (b) bytes process 1 receives per global batch: ours (its slice) vs reference (the global batch, "
        f"broadcast) | {per_batch / 1e6:.3f} MB | {global_batch / 1e6:.3f} MB | {per_batch / global_batch:.2f}x | |",
        flush=True,
    )

    ours, theirs, skip = resume(args.resume_samples, 32, 8, args.repeats)
    ratio = ours / theirs
    print(
        f"| (c) first batch after resuming at batch {skip:,} (90 %) of a shuffled {args.resume_samples:,}-sample "
        f"epoch, N=8, B=32, process 0: load_state_dict vs reference skip_first_batches | {ours:.3f} s | "
        f"{theirs:.3f} s | {ratio:.3f}x | <= 1/3, {'met' if ratio <= TARGET_RESUME else 'MISSED'} |",
        flush=True,
    )

    ours, theirs, consumed = resume_elsewhere(args.resume_samples, 32, 8, 6, args.repeats)
    ratio = ours / theirs
    print(
        f"| (d) first batch after resuming at 90 % ({consumed:,} samples consumed) of a shuffled "
        f"{args.resume_samples:,}-sample epoch saved by N=8 on M=6 processes, B=32, process 0: load_state_dict vs "
        f"reference skip_first_batches at 90 % on 6 | {ours:.3f} s | {theirs:.3f} s | {ratio:.3f}x | <= 1/3, "
        f"{'met' if ratio <= TARGET_RESUME else 'MISSED'} |",
        flush=True,
    )


if __name__ == "__main__":
    main()
