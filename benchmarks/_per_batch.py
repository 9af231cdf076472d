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
LOADERS = ("plain", "ours", "release", "reference")


def time_loaders(
    checkout: str, samples: int, batch_size: int, num_processes: int, repeats: int
) -> tuple[dict[str, dict[str, list[float]]], int]:
    """One epoch of process 0 through four loaders reading the same batches, for each placement.

    ``plain``: a ``DataLoader`` over this process's index lists, computed beforehand; ``ours``: this
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
        starts = {"plain": lambda plain=plain: plain, **starts}
        expected = _first_fields(starts["plain"])
        for name, start in starts.items():
            if not all(torch.equal(a, b) for a, b in zip(expected, _first_fields(start), strict=True)):
                raise SystemExit(
                    f"(e): {name} and a plain DataLoader yield different batches (device={device})"
                )
        runs = {name: (lambda start=start: deque(start(), maxlen=0)) for name, start in starts.items()}
        results[str(device)] = alternating(runs, repeats)
    return results, len(indices)


def per_batch_parts(samples: int, batch_size: int, num_processes: int, repeats: int) -> dict[str, float]:
    """Two parts of ours' time per batch beyond the plain loader's, each timed alone against its bare
    counterpart (us per batch, of medians): computing the epoch's indices (our batch sampler against
    iterating the precomputed lists) and placing a batch already on the CPU (``send_to_device`` against
    nothing)."""
    dataset = rows(samples)
    ours = prepare_data_loader(
        shuffled_rows(dataset, batch_size)(), num_processes=num_processes, process_index=0
    )
    sampler, generator, cpu = ours.batch_sampler, ours.generator, torch.device("cpu")
    indices = list(sampler)
    batches = list(DataLoader(dataset, batch_sampler=indices))

    def index_ours() -> None:
        generator.manual_seed(0)
        deque(sampler, maxlen=0)

    runs = {
        "index_ours": index_ours,
        "index_plain": lambda: deque(iter(indices), maxlen=0),
        "place_ours": lambda: deque((send_to_device(batch, cpu) for batch in batches), maxlen=0),
        "place_none": lambda: deque((batch for batch in batches), maxlen=0),
    }
    medians = {name: statistics.median(times) for name, times in alternating(runs, repeats).items()}
    per_batch = 1e6 / len(indices)
    return {
        "indices": (medians["index_ours"] - medians["index_plain"]) * per_batch,
        "placement": (medians["place_ours"] - medians["place_none"]) * per_batch,
    }


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
    """(e): time the four loaders (process 0 of 2, batch size 16), print the table, then where ours' time
    beyond the plain loader's goes."""
    times, batches = time_loaders(checkout, samples, 16, 2, repeats)
    print_table(times, checkout, batches)
    parts = per_batch_parts(samples, 16, 2, repeats)
    beyond = {
        device: (statistics.median(runs["ours"]) - statistics.median(runs["plain"])) / batches * 1e6
        for device, runs in times.items()
    }
    print(
        f"ours beyond plain, per batch: {beyond['None']:.2f} us (device=None), {beyond['cpu']:.2f} us "
        f"(device='cpu'); parts timed alone: computing the epoch's indices {parts['indices']:.2f} us, placing "
        f"a batch already on the CPU {parts['placement']:.2f} us; the rest (the look-ahead loop, the epoch's "
        f"set-up) {beyond['None'] - parts['indices']:.2f} us",
        flush=True,
    )
