"""(e) of ``bench_loaders.py`` (issue 18): the per-batch path of ours against a release's and the reference's.

Four loaders read the same batches of process 0, alternating: a plain ``DataLoader``, ours, the release's
(another checkout of this package, imported beside this one by ``_release.py``) and accelerate's.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from _datasets import rows, shuffled_rows
from _release import import_release
from _timing import alternating
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from lightning_shard.comm.tree import send_to_device

TARGET_OVERHEAD = 1.05
"""At most this over the plain loader, for ours (issue 18)."""
LOADERS = ("plain", "indexed", "ours", "release", "reference")


def time_loaders(
    checkout: str, samples: int, batch_size: int, num_processes: int, repeats: int
) -> tuple[dict[str, dict[str, list[float]]], int]:
    """One epoch of process 0 through five loaders reading the same batches, for each placement.

    ``plain``: a ``DataLoader`` over this process's index lists, computed beforehand; ``indexed``: a
    ``DataLoader`` over our index source (what computing the indices during the epoch costs); ``ours``: this
    checkout's ``DataLoaderShard``; ``release``: the one of the checkout at ``checkout`` (0.1); ``reference``:
    accelerate's. Each from its ``prepare_data_loader`` with the defaults (``device=None``, as
    ``put_on_device=False`` gives), then with ``put_on_device=True, device="cpu"`` (the batch is already
    where it should be, as on a CPU fit). Returns the times (s) per placement, then per loader, and the
    number of batches of the epoch.
    """
    from accelerate.data_loader import prepare_data_loader as reference_prepare

    release = import_release(checkout, "prepare")
    dataset = rows(samples)
    user = shuffled_rows(dataset, batch_size)
    results = {}
    for device in (None, "cpu"):
        place = {"num_processes": num_processes, "process_index": 0, "put_on_device": device is not None}
        ours = prepare_data_loader(user(), device=device, **place)
        old = release.prepare_data_loader(user(), device=device, **place)
        theirs = reference_prepare(user(), device=None if device is None else torch.device(device), **place)
        starts = {"ours": _from_state(ours), "release": _from_state(old), "reference": _reseeded(theirs)}
        indices = [batch[:, 0].long().tolist() for batch in _first_fields(starts["ours"])]
        plain = DataLoader(dataset, batch_sampler=indices)
        starts = {"plain": lambda plain=plain: plain, "indexed": _indexed(user, num_processes), **starts}
        expected = _first_fields(starts["plain"])
        for name, start in starts.items():
            if not all(torch.equal(a, b) for a, b in zip(expected, _first_fields(start), strict=True)):
                raise SystemExit(
                    f"(e): {name} and a plain DataLoader yield different batches (device={device})"
                )
        runs = {name: (lambda start=start: deque(start(), maxlen=0)) for name, start in starts.items()}
        results[str(device)] = alternating(runs, repeats)
    return results, len(indices)


def placement_cost(samples: int, batch_size: int, repeats: int) -> float:
    """Microseconds ``send_to_device`` takes per batch already on the CPU (our batches: a list of one
    tensor), against a loop over the same batches that does nothing; medians."""
    dataset = rows(samples)
    batches = list(shuffled_rows(dataset, batch_size)())
    cpu = torch.device("cpu")
    runs = {
        "placed": lambda: deque((send_to_device(batch, cpu) for batch in batches), maxlen=0),
        "bare": lambda: deque((batch for batch in batches), maxlen=0),
    }
    medians = {name: statistics.median(times) for name, times in alternating(runs, repeats).items()}
    return (medians["placed"] - medians["bare"]) / len(batches) * 1e6


def _indexed(user: Callable[[], DataLoader], num_processes: int) -> Callable[[], Any]:
    """A plain ``DataLoader`` over our index source (of a loader of ours that never iterates), with the
    generator it shares, at the start of the same epoch each time."""
    ours = prepare_data_loader(user(), num_processes=num_processes, process_index=0)
    loader = DataLoader(ours.dataset, batch_sampler=ours.batch_sampler, generator=ours.generator)
    generator = ours.generator
    state = generator.get_state()

    def start() -> Any:
        generator.set_state(state)
        return loader

    return start


def _from_state(loader: Any) -> Callable[[], Any]:
    """``loader`` at the start of the same epoch each time (its state at its start, loaded)."""
    state = loader.state_dict()

    def start() -> Any:
        loader.load_state_dict(state)
        return loader

    return start


def _reseeded(loader: Any) -> Callable[[], Any]:
    """The reference's ``loader`` at the start of the same epoch each time (its generator reseeded)."""

    def start() -> Any:
        loader.batch_sampler.batch_sampler.sampler.generator.manual_seed(0)
        return loader

    return start


def _first_fields(start: Callable[[], Any]) -> list[torch.Tensor]:
    return [batch[0] for batch in start()]


def print_table(times: dict[str, dict[str, list[float]]], checkout: str, batches: int) -> None:
    """The table of (e): each loader's median epoch and its ratio to the plain loader's median (the target's
    figure), then the same ratio taken round by round (runs next to each other): median, min to max."""
    print(
        f"\n(e) per-batch path vs the release at {checkout} and accelerate's DataLoaderShard (the reference)"
    )
    print(
        "| device | loader | median epoch (s) | us/batch | ratio to plain | per round: median (min to max) | target |"
    )
    print("|---|---|---:|---:|---:|---:|---|")
    for device, runs in times.items():
        plain = statistics.median(runs["plain"])
        for name in LOADERS:
            middle = statistics.median(runs[name])
            ratio = middle / plain
            rounds = [mine / base for mine, base in zip(runs[name], runs["plain"], strict=True)]
            verdict = f"<= {TARGET_OVERHEAD}x, {'met' if ratio <= TARGET_OVERHEAD else 'MISSED'}"
            print(
                f"| {device} | {name} | {middle:.4f} | {middle / batches * 1e6:.1f} | {ratio:.3f}x | "
                f"{statistics.median(rounds):.3f}x ({min(rounds):.3f}x to {max(rounds):.3f}x) | "
                f"{verdict if name == 'ours' else ''} |",
                flush=True,
            )


def against_release(checkout: str, samples: int, repeats: int) -> None:
    """(e): time the loaders (process 0 of 2, batch size 16), print the table, then where ours' time beyond
    the plain loader's goes."""
    times, batches = time_loaders(checkout, samples, 16, 2, repeats)
    print_table(times, checkout, batches)
    medians = {
        device: {name: statistics.median(runs[name]) for name in runs} for device, runs in times.items()
    }
    per_batch = {
        device: {name: (value - middle["plain"]) / batches * 1e6 for name, value in middle.items()}
        for device, middle in medians.items()
    }
    none, cpu = per_batch["None"], per_batch["cpu"]
    print(
        f"ours beyond plain, per batch: {none['ours']:.2f} us (device=None), {cpu['ours']:.2f} us (device='cpu'). "
        f"Of it: computing the epoch's indices (indexed - plain) {none['indexed']:.2f} us; the look-ahead loop "
        f"and the epoch's set-up (ours - indexed, device=None) {none['ours'] - none['indexed']:.2f} us; placing "
        f"a batch already on the CPU, timed alone {placement_cost(samples, 16, repeats):.2f} us",
        flush=True,
    )
