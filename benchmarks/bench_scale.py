"""Data-centre scale by simulation (docs/DESIGN.md, "Scale"): one process plays rank ``r`` of ``N``.

``torch.distributed`` is replaced, in the package's modules and for the length of each measurement
only, by ``LocalGroup``, a stand-in written here: its collectives do locally what a process receives
(an all-gather fills ``N`` copies of this process's part, an all-reduce scales it by ``N``, an object
all-gather unpickles ``N`` copies), so this process's CPU time and memory are real and the network is
not. Per path, per dataset size ``n`` and number of processes ``N``, it prints the median time and the
peak memory of one process:

- prepare: ``prepare_data_loader`` of a shuffled loader;
- index epoch: one epoch of this process's batches of indices (``RandomSampler``'s ``randperm`` of the
  whole epoch on every process, against ``scalable_shuffle``'s keyed permutation at its positions);
- resume: ``load_state_dict`` of a mid-epoch state saved by ``N`` processes into a loader of ``N / 2``
  (elastic), then its first batch; and the state's size as JSON;
- audit: ``ShardAudit.gather`` of ``n`` samples, the previous all-gather of bitmaps (kept below as the
  baseline) against the compact all-reduce;
- gather_for_metrics: ``gather_in_process_order`` of a step's outputs, the previous implementation
  (kept below) against the vectorised one;
- stream agreement: one fetch's check of a natively sharded stream where shares end (the worst case): now
  two integers, before one integer and the ``3 x N`` vector of who ended; and a whole epoch of one step
  (its checks and the report's sums, once an epoch);
- audit epoch end: the audit callback's agreement on whether every process ended its epoch, now one
  integer's minimum, before an object all-gather of one flag per process;
- random states: what each checkpoint saves of the processes' random states, now each process its own
  (process 0's in the checkpoint, the others' beside it), before every process's gathered on process 0
  (``gather_object``) and written there; the bytes process 0 writes and those each other process writes.

Every row also says how many bytes this process received in its collectives per call (the size of each
reduced tensor, of each gathered output, of each unpickled object), as the stand-in counts them: what
must stay flat in ``N`` on the per-step and per-epoch paths.

Times are medians (gc collected before and disabled while timing, variants alternating); memory is
the rise of the peak resident set (``VmHWM`` after resetting it, Linux) over the resident set before.

``--pair`` adds the side-by-side check at ``N = 2`` on real gloo processes: the previous
``gather_in_process_order`` against the current one, alternating, in the same two processes.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_scale.py            # n <= 10^7: minutes (RESULTS.md)
    OMP_NUM_THREADS=1 python benchmarks/bench_scale.py --full     # n up to 10^8, N up to 16,384
    OMP_NUM_THREADS=1 python benchmarks/bench_scale.py --pair     # only the N = 2 gloo comparison
    OMP_NUM_THREADS=1 python benchmarks/bench_scale.py --full --only random_states   # one group of rows
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import importlib
import io
import json
import os
import pickle
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as real_dist
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._datasets import Indices  # noqa: E402
from lightning_shard import BatchSamplerShard, ShardAudit, prepare_data_loader  # noqa: E402
from lightning_shard.comm.collectives import all_true  # noqa: E402
from lightning_shard.comm.gather import gather_in_process_order, merge_parts  # noqa: E402
from lightning_shard.comm.random_states import capture, own_part  # noqa: E402
from lightning_shard.comm.tree import Node, flatten, is_tensor_tree, map_leaves  # noqa: E402
from lightning_shard.loaders.position import PAD, DataKind, Position  # noqa: E402
from lightning_shard.loaders.stream_agreement import Agreement  # noqa: E402
from lightning_shard.loaders.streams import StreamRun  # noqa: E402
from lightning_shard.sampling.samplers import ScalableRandomSampler  # noqa: E402

BATCH = 32
_PATCHED = (
    "lightning_shard.audit",
    "lightning_shard.comm.collectives",
    "lightning_shard.comm.gather",
    "lightning_shard.comm.topology",
    "lightning_shard.loaders.streams",
    "lightning_shard.loaders.stream_agreement",
)


# -- the stand-in for torch.distributed -------------------------------------------------------------------
class _Done:
    def wait(self) -> bool:
        return True


class LocalGroup:
    """``torch.distributed`` as seen by rank ``rank`` of ``world`` processes that all hold the same data."""

    ReduceOp = real_dist.ReduceOp

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.receive = True
        self.received = 0
        """Bytes this process received in its collectives (an all-reduce counts its tensor once)."""
        """``False``: the all-gathers into one tensor fill only small buffers (headers, up to 64
        elements per process) and leave large ones as the network would write them, untouched."""

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_world_size(self, group: Any = None) -> int:
        return self.world

    def get_rank(self, group: Any = None) -> int:
        return self.rank

    def get_backend(self, group: Any = None) -> str:
        return "gloo"

    def all_reduce(
        self,
        tensor: torch.Tensor,
        op: Any = real_dist.ReduceOp.SUM,
        group: Any = None,
        async_op: bool = False,
    ) -> Any:
        self.received += tensor.numel() * tensor.element_size()
        if op == real_dist.ReduceOp.SUM:
            tensor.mul_(self.world)
        return _Done() if async_op else None

    def all_gather_single(self, out: torch.Tensor, local: torch.Tensor, group: Any = None) -> None:
        self.received += out.numel() * out.element_size()
        if self.receive or local.numel() <= 64:
            out.view(self.world, -1).copy_(local.reshape(1, -1))

    all_gather_into_tensor = all_gather_single

    def all_gather(self, outs: list[torch.Tensor], local: torch.Tensor, group: Any = None) -> None:
        for out in outs:
            self.received += out.numel() * out.element_size()
            out.copy_(local)

    def all_gather_object(self, outs: list[Any], value: Any, group: Any = None) -> None:
        blob = pickle.dumps(value)
        self.received += len(blob) * len(outs)
        for index in range(len(outs)):
            outs[index] = pickle.loads(blob)

    def gather_object(
        self, value: Any, outs: list[Any] | None = None, dst: int = 0, group: Any = None
    ) -> None:
        if self.rank != dst or outs is None:
            return
        blob = pickle.dumps(value)
        self.received += len(blob) * len(outs)
        for index in range(len(outs)):
            outs[index] = pickle.loads(blob)

    def broadcast_object_list(self, values: list[Any], src: int = 0, group: Any = None) -> None:
        return None

    def barrier(self, group: Any = None) -> None:
        return None


_CURRENT: Any = real_dist


@contextlib.contextmanager
def playing(rank: int, world: int) -> Iterator[None]:
    """The package's modules (and the baselines below) see ``LocalGroup(rank, world)`` as ``dist``."""
    global _CURRENT
    modules = [importlib.import_module(name) for name in _PATCHED]
    saved = [module.dist for module in modules]
    group = LocalGroup(rank, world)
    for module in modules:
        module.dist = group
    _CURRENT = group
    try:
        yield
    finally:
        for module, original in zip(modules, saved, strict=True):
            module.dist = original
        _CURRENT = real_dist


# -- the previous implementations, the baselines --------------------------------------------------------
def old_gather_in_process_order(data: Any, sources: Sequence[int] | None = None) -> Any:
    """``gather_in_process_order`` as of commit a5c6b7c: an object all-gather of the signature, lists."""
    dist = _CURRENT
    signatures: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(signatures, _old_signature(data))
    if is_tensor_tree(data) and all(signature == signatures[0] for signature in signatures):
        return map_leaves(lambda tensor: _old_gather_tensor(tensor, sources), data)
    parts: list[Any] = [None] * len(signatures)
    dist.all_gather_object(parts, data)
    return merge_parts(parts if sources is None else [parts[rank] for rank in sources])


def _old_signature(data: Any) -> Any:
    node, leaves = flatten(data)
    return (_old_shape(node), tuple(_old_leaf(leaf) for leaf in leaves))


def _old_shape(node: Node) -> Any:
    if node.kind == "const":
        return ("const", type(node.value).__name__)
    return (node.kind, node.keys, tuple(_old_shape(child) for child in node.children))


def _old_leaf(leaf: Any) -> Any:
    if isinstance(leaf, torch.Tensor):
        return (str(leaf.dtype), tuple(leaf.shape[1:]), leaf.dim() > 0)
    return ("seq", len(leaf))


def _old_gather_tensor(tensor: torch.Tensor, sources: Sequence[int] | None) -> torch.Tensor:
    tensor = tensor.reshape(1) if tensor.dim() == 0 else tensor
    sizes = _old_all_gather(torch.tensor([tensor.shape[0]], device=tensor.device))
    longest = int(max(sizes).item())
    padded = tensor
    if tensor.shape[0] < longest:
        padded = torch.cat([tensor, tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))])
    parts = _old_all_gather(padded.contiguous())
    kept = zip(
        parts if sources is None else [parts[r] for r in sources],
        sizes if sources is None else [sizes[r] for r in sources],
        strict=True,
    )
    return torch.cat([part[: int(size.item())] for part, size in kept])


def _old_all_gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    parts = [torch.empty_like(tensor) for _ in range(_CURRENT.get_world_size())]
    _CURRENT.all_gather(parts, tensor)
    return parts


def old_audit_gather(audit: ShardAudit) -> ShardAudit:
    """``ShardAudit.gather`` as of commit a5c6b7c: every process's bitmaps all-gathered and merged."""
    dist = _CURRENT
    local = torch.cat([audit.seen, audit.repeated])
    bitmaps = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(bitmaps, local)
    records = torch.tensor([audit.records], dtype=torch.int64)
    dist.all_reduce(records)
    size = audit.seen.numel()
    merged = ShardAudit(audit.dataset_length)
    for bitmap in bitmaps:
        part = ShardAudit(audit.dataset_length)
        part.seen, part.repeated = bitmap[:size], bitmap[size:]
        merged = merged.merge(part)
    merged.records = int(records.item())
    return merged


# -- measuring ------------------------------------------------------------------------------------------
def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def _peak_rise(run: Callable[[], Any]) -> int:
    """How far the resident set rises above where it was while ``run`` runs (bytes)."""
    gc.collect()
    _LIBC.malloc_trim(0)  # NOTE: freed heap pages leave the resident set, so reusing them counts again
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # NOTE: resets the peak resident set (VmHWM) to the current one
    before = _status("VmRSS")
    result = run()
    rise = _status("VmHWM") - before
    del result
    return max(rise, 0)


_LIBC = ctypes.CDLL("libc.so.6")


def _fixed_malloc_thresholds() -> None:
    """Large blocks mapped and unmapped, so a freed tensor leaves the resident set and every measured
    peak is the measured call's own (glibc otherwise raises its mmap threshold and keeps freed blocks)."""
    _LIBC.mallopt(-3, 1 << 17)  # NOTE: M_MMAP_THRESHOLD; setting it turns the dynamic threshold off
    _LIBC.mallopt(-1, 1 << 17)  # NOTE: M_TRIM_THRESHOLD


def measure(variants: dict[str, Callable[[], Any]], repeats: int) -> dict[str, tuple[float, int, int]]:
    """Median time, peak memory rise and bytes received per call of each variant, the variants alternating."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, run in variants.items():
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
            finally:
                gc.enable()
    return {
        name: (statistics.median(times[name]), _peak_rise(run), _received(run))
        for name, run in variants.items()
    }


def _received(run: Callable[[], Any]) -> int:
    """Bytes one call of ``run`` receives in collectives (0 outside ``playing``: no collective is simulated)."""
    if not isinstance(_CURRENT, LocalGroup):
        return 0
    before = _CURRENT.received
    run()
    return _CURRENT.received - before


# -- the paths -------------------------------------------------------------------------------------------
def _loader(n: int, world: int, rank: int, scalable: bool) -> Any:
    return prepare_data_loader(
        DataLoader(Indices(n), batch_size=BATCH, shuffle=True),
        num_processes=world,
        process_index=rank,
        scalable_shuffle=scalable,
        data_seed=0,
    )


def _epoch(n: int, world: int, rank: int, scalable: bool) -> Callable[[], int]:
    sampler = ScalableRandomSampler(range(n), data_seed=0) if scalable else RandomSampler(range(n))
    shard = BatchSamplerShard(BatchSampler(sampler, BATCH, False), world, rank)

    def run() -> int:
        return sum(1 for _ in shard)

    return run


def _resume(n: int, world: int, rank: int, scalable: bool) -> tuple[Callable[[], Any], int]:
    saved = _loader(n, world, rank, scalable).state_dict(steps=max(n // (BATCH * world) // 2, 1))
    text = json.dumps(saved)
    new_world = max(world // 2, 1)

    def run() -> Any:
        loader = _loader(n, new_world, rank % new_world, scalable)
        loader.load_state_dict(json.loads(text))
        return next(iter(loader))

    return run, len(text)


def index_rows(sizes: list[int], worlds: list[int], repeats: int, full_cap: int) -> list[str]:
    rows = []
    for n in sizes:
        for world in worlds:
            rank = world - 1
            with playing(rank, world):
                for scalable in (False, True):
                    if not scalable and n > full_cap:
                        continue
                    label = "scalable_shuffle" if scalable else "RandomSampler"
                    resume, state_bytes = _resume(n, world, rank, scalable)
                    result = measure(
                        {
                            "prepare": partial(_loader, n, world, rank, scalable),
                            "index epoch": _epoch(n, world, rank, scalable),
                            "resume": resume,
                        },
                        repeats,
                    )
                    for path, (seconds, peak, received) in result.items():
                        note = f"state {state_bytes:,} B" if path == "resume" else ""
                        rows.append(_row(path, n, world, label, seconds, peak, received, note))
                    print(rows[-1], file=sys.stderr, flush=True)
    return rows


def audit_rows(n: int, worlds: list[int], repeats: int, old_cap_bytes: int) -> list[str]:
    rows = []
    for world in worlds:
        audit = ShardAudit(n)
        audit.record_indices(torch.arange(world - 1, n, world))
        with playing(world - 1, world):
            variants: dict[str, Callable[[], Any]] = {"compact all-reduce (now)": audit.gather}
            if world * n // 4 <= old_cap_bytes:
                variants["all-gather of bitmaps (before)"] = partial(old_audit_gather, audit)
            payload = len(json.dumps(audit.gather().to_state()))
            for label, (seconds, peak, received) in measure(variants, repeats).items():
                note = f"checkpoint record {payload:,} B"
                rows.append(_row("audit", n, world, label, seconds, peak, received, note))
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def _outputs(rank: int) -> dict[str, torch.Tensor]:
    return {
        "preds": torch.randn(BATCH, 10),
        "target": torch.randint(0, 10, (BATCH,)),
        "id": torch.arange(BATCH) + rank,
    }


def _without_receive(outputs: Any) -> Any:
    """``gather_in_process_order`` with the stand-in writing only the headers: the process's own work."""
    _CURRENT.receive = False
    try:
        return gather_in_process_order(outputs)
    finally:
        _CURRENT.receive = True


def gather_rows(worlds: list[int], repeats: int) -> list[str]:
    rows = []
    for world in worlds:
        outputs = _outputs(world - 1)
        with playing(world - 1, world):
            variants = {
                "vectorised (now)": partial(gather_in_process_order, outputs),
                "object signature + lists (before)": partial(old_gather_in_process_order, outputs),
                "vectorised (now), receive buffers left to the network": partial(_without_receive, outputs),
            }
            for label, (seconds, peak, received) in measure(variants, repeats).items():
                note = f"{world * BATCH:,} rows out"
                rows.append(_row("gather_for_metrics", None, world, label, seconds, peak, received, note))
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def stream_rows(worlds: list[int], repeats: int) -> list[str]:
    """The stream end agreement: one fetch's check where shares end (the worst case), now and before; and
    a whole epoch of ``StreamRun`` (two checks and the report's sums at its end)."""
    rows = []
    for world in worlds:
        with playing(world - 1, world):
            variants = {
                "all-reduce of 2 integers (now)": partial(_fetch, ended=True),
                "all-reduce of 1 integer + 3 x N (before)": partial(old_fetch_where_shares_end, world),
                "epoch of 1 step: 2 checks + the report's 3 x N + 1 (now)": partial(_stream_epoch, world),
            }
            notes = {
                "all-reduce of 2 integers (now)": "every fetch, those where shares end included",
                "all-reduce of 1 integer + 3 x N (before)": "at each fetch where a share ends, up to N an epoch",
                "epoch of 1 step: 2 checks + the report's 3 x N + 1 (now)": "the report: once an epoch",
            }
            for label, (seconds, peak, received) in measure(variants, repeats).items():
                path = (
                    "stream agreement (per fetch)" if "epoch" not in label else "stream agreement (per epoch)"
                )
                rows.append(_row(path, None, world, label, seconds, peak, received, notes[label]))
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def _fetch(ended: bool) -> tuple[int, int]:
    """One fetch's check (``Agreement``); ``ended``: this process's share ended at this fetch."""
    agreement = Agreement()
    agreement.start(ended, False)
    return agreement.settle()


def _stream_epoch(world: int, steps: int = 1) -> Any:
    """A whole epoch of ``StreamRun`` (``"pad"``) over a share of ``steps`` batches, which ends on every
    process at the same fetch (the stand-in's processes all hold the same data); its report."""
    run = StreamRun(DataKind("shares", stream_ends=PAD), world, world - 1)
    share = [torch.arange(BATCH)] * steps
    for _ in run.batches(iter(share), lambda: iter(share), len, Position(0), None):
        pass
    return run.report


def stream_epoch_received(world: int, steps: int) -> int:
    """Bytes rank ``N - 1`` of ``world`` receives in the agreement of an epoch of ``steps`` steps of a
    natively sharded stream (``steps + 1`` fetches, the last where the shares end, and the report)."""
    with playing(world - 1, world):
        return _received(partial(_stream_epoch, world, steps))


def old_fetch_where_shares_end(world: int) -> list[int]:
    """A fetch's check where a share ends as of commit 7b203b2: one integer (how many shares ended), then,
    the count having risen, the ``3 x N`` vector of who ended and what each yielded."""
    count = torch.tensor([1], dtype=torch.int64)
    _CURRENT.all_reduce(count)
    vector = torch.zeros(3 * world, dtype=torch.int64)
    vector[world - 1], vector[2 * world - 1] = 1, BATCH
    _CURRENT.all_reduce(vector)
    return [int(value) for value in vector.tolist()]


def epoch_end_rows(worlds: list[int], repeats: int) -> list[str]:
    """The audit callback's end-of-epoch agreement: did every process end its epoch."""
    rows = []
    for world in worlds:
        with playing(world - 1, world):
            variants = {
                "all-reduce (min) of 1 integer (now)": partial(all_true, True),
                "object all-gather of a flag per process (before)": partial(old_all_ended, True),
            }
            for label, (seconds, peak, received) in measure(variants, repeats).items():
                rows.append(_row("audit epoch end", None, world, label, seconds, peak, received, "per epoch"))
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def old_all_ended(flag: bool) -> bool:
    """The audit callback's agreement as of commit 710fab5: ``all(all_gather_objects(flag))``."""
    flags: list[Any] = [None] * _CURRENT.get_world_size()
    _CURRENT.all_gather_object(flags, flag)
    return all(flags)


def random_state_rows(worlds: list[int], repeats: int) -> list[str]:
    """What each checkpoint saves of the random states, played as process 0 (where the gathered ones grew);
    the notes say the bytes process 0 writes and those each other process writes."""
    rows = []
    for world in worlds:
        with playing(world - 1, world):
            other = new_checkpoint_states()
        with playing(0, world):
            variants = {"each process its own (now)": new_checkpoint_states}
            variants["gathered on process 0 (before)"] = old_checkpoint_states
            notes = {
                "each process its own (now)": f"process 0 writes {new_checkpoint_states():,} B, "
                f"each other process {other:,} B",
                "gathered on process 0 (before)": f"process 0 writes {old_checkpoint_states():,} B, "
                "each other process 0 B",
            }
            for label, (seconds, peak, received) in measure(variants, repeats).items():
                path = "random states (per checkpoint)"
                rows.append(_row(path, None, world, label, seconds, peak, received, notes[label]))
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def new_checkpoint_states() -> int:
    """What this process writes of the random states now: its own (``own_part``), in the checkpoint
    (process 0) or beside it (the others)."""
    return _saved_bytes(own_part())


def _saved_bytes(state: Any) -> int:
    """The bytes ``torch.save`` writes for ``state`` (what ``TorchCheckpointIO`` writes of it)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return len(buffer.getvalue())


def old_checkpoint_states() -> int:
    """What process 0 wrote as of commit b13025a: every process's states, gathered (``gather_object``)."""
    own, size, rank = capture(), _CURRENT.get_world_size(), _CURRENT.get_rank()
    states: list[Any] | None = [None] * size if rank == 0 else None
    _CURRENT.gather_object(own, states, dst=0)
    return _saved_bytes({"version": 1, "world_size": size, "states": states} if rank == 0 else {})


def _row(
    path: str, n: int | None, world: int, variant: str, seconds: float, peak: int, received: int, note: str
) -> str:
    size = "" if n is None else f"{n:.0e}".replace("e+0", "e")
    return (
        f"| {path} | {size} | {world:,} | {variant} | {seconds * 1000:,.1f} | {peak / 2**20:,.1f} "
        f"| {received:,} | {note} |"
    )


# -- N = 2 on real gloo processes --------------------------------------------------------------------------
_CALLS = 10
"""Calls per timed sample at ``N = 2``: one call is a few hundred microseconds, below the scheduler's noise."""


def _pair(rank: int, world: int, repeats: int) -> dict[str, float]:
    torch.set_num_threads(1)
    cases = {
        "tensor": torch.arange(BATCH) + rank,
        "dict": _outputs(rank),
        "uneven": torch.arange(BATCH - rank),
    }
    medians = {}
    for name, data in cases.items():
        if not _equal(gather_in_process_order(data), old_gather_in_process_order(data)):
            raise SystemExit(f"{name}: the two implementations gather different results")
        samples: dict[str, list[float]] = {"now": [], "before": []}
        for _ in range(repeats):
            for label, function in (
                ("now", gather_in_process_order),
                ("before", old_gather_in_process_order),
            ):
                real_dist.barrier()
                gc.collect()
                gc.disable()
                start = time.perf_counter()
                for _ in range(_CALLS):
                    function(data)
                samples[label].append((time.perf_counter() - start) / _CALLS)
                gc.enable()
        for label, values in samples.items():
            medians[f"{name}: {label}"] = statistics.median(values)
    return medians


def _equal(left: Any, right: Any) -> bool:
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_equal(left[key], right[key]) for key in left)
    return bool(torch.equal(left, right))


def pair_table(repeats: int) -> str:
    from benchmarks._processes import on_processes

    results = on_processes(_pair, 2, repeats)
    lines = ["| output | before (ms) | now (ms) | before / now |", "|---|---:|---:|---:|"]
    for case in ("tensor", "dict", "uneven"):
        before = max(result[f"{case}: before"] for result in results)
        now = max(result[f"{case}: now"] for result in results)
        lines.append(f"| {case} | {before * 1000:.3f} | {now * 1000:.3f} | {before / now:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="n up to 10^8 and N up to 16,384 (minutes)")
    parser.add_argument(
        "--pair", action="store_true", help="only the N = 2 gloo comparison of gather_for_metrics"
    )
    parser.add_argument("--only", choices=list(_GROUPS), help="only this group of rows (no N = 2 comparison)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    if not args.pair:
        header = [
            "| path | n | N | variant | time per process (ms) | peak memory per process (MB) "
            "| received per process (B) | notes |",
            "|---|---|---:|---|---:|---:|---:|---|",
        ]
        groups = [args.only] if args.only else list(_GROUPS)
        rows = [row for group in groups for row in _GROUPS[group](args.full, args.repeats)]
        print("\n".join(header + rows))
    if args.only:
        return
    print(
        f"\ngather_for_metrics at N = 2, real gloo processes, median of {5 * args.repeats} x {_CALLS} calls"
    )
    print(pair_table(5 * args.repeats))


def _worlds(full: bool) -> list[int]:
    return [8, 1024, 4096, 16384] if full else [8, 1024, 16384]


_GROUPS: dict[str, Callable[[bool, int], list[str]]] = {
    "index": lambda full, repeats: index_rows(
        [10**6, 10**7, 10**8] if full else [10**6, 10**7], _worlds(full), repeats, 10**8 if full else 10**7
    ),
    "audit": lambda full, repeats: audit_rows(
        10**6, _worlds(full) if full else [8, 1024, 4096, 16384], repeats, 2**30 if full else 2**28
    ),
    "gather": lambda full, repeats: gather_rows([2, 64, 1024, 16384], repeats),
    "stream": lambda full, repeats: stream_rows(
        [8, 64, 1024, 4096, 16384] if full else [8, 1024, 16384], repeats
    ),
    "epoch_end": lambda full, repeats: epoch_end_rows([8, 1024, 16384], repeats),
    "random_states": lambda full, repeats: random_state_rows(_worlds(full), repeats),
}
"""The groups of rows, in the order a whole run prints them: ``(full, repeats) -> rows``."""


if __name__ == "__main__":
    main()
