"""Draw how often each sample is read over an epoch stopped on 2 processes and resumed on 3.

    python examples/audit_plot.py [OUT.png]     # default: docs/images/audit_reads.png

No process group is needed: each process's loader is built with its ``process_index``. Top: the loaders
of ``prepare_data_loader`` resume from their saved position, so every sample is read once, plus the new
process count's end-of-epoch padding. Bottom: a loader without a saved position restarts the epoch, so
every sample read before the stop is read again. ``ShardAudit`` checks both and its lines are printed
(and drawn as the panel titles).
"""

from __future__ import annotations

import sys
import textwrap
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

from lightning_shard import ShardAudit, prepare_data_loader  # noqa: E402

SAMPLES = 60
BATCH = 4
STOP_AFTER = 4  # steps on 2 processes before the stop
OUT = Path(__file__).parents[1] / "docs" / "images" / "audit_reads.png"


def sharded(num_processes: int) -> list[DataLoader]:
    """One loader per process, as ``ShardStrategy`` builds them (seeded shuffle)."""
    return [
        prepare_data_loader(
            DataLoader(range(SAMPLES), batch_size=BATCH, shuffle=True),
            num_processes=num_processes,
            process_index=rank,
            use_seedable_sampler=True,
            data_seed=0,
        )
        for rank in range(num_processes)
    ]


def restarted(num_processes: int) -> list[DataLoader]:
    """One loader per process with a ``DistributedSampler``: no position to resume from."""
    return [
        DataLoader(
            range(SAMPLES),
            batch_size=BATCH,
            sampler=DistributedSampler(range(SAMPLES), num_replicas=num_processes, rank=rank, seed=0),
        )
        for rank in range(num_processes)
    ]


def first_steps(loaders: list[DataLoader]) -> Counter[int]:
    reads: Counter[int] = Counter()
    running = [iter(loader) for loader in loaders]
    for _ in range(STOP_AFTER):
        for batches in running:
            reads.update(next(batches).tolist())
    return reads


def resume_exactly() -> tuple[Counter[int], Counter[int], int]:
    """Reads before the stop and after the resume, and the padding the 3 processes' epoch end allows."""
    stopped = sharded(2)
    before = first_steps(stopped)
    state = stopped[0].state_dict()
    after: Counter[int] = Counter()
    resumed = sharded(3)
    for loader in resumed:
        loader.load_state_dict(state)
        after.update(index for batch in loader for index in batch.tolist())
    left = SAMPLES - sum(before.values())
    steps = -(-left // (3 * BATCH))
    return before, after, steps * 3 * BATCH - left


def restart_epoch() -> tuple[Counter[int], Counter[int], int]:
    before = first_steps(restarted(2))
    after = Counter(index for loader in restarted(3) for batch in loader for index in batch.tolist())
    return before, after, 0


def audit(before: Counter[int], after: Counter[int], padding: int) -> str:
    check = ShardAudit(SAMPLES, allowed_padding=padding)
    check.record_indices(list((before + after).elements()))
    return check.report().summary()


def draw(panels: list[tuple[str, Counter[int], Counter[int], str]], out: Path) -> None:
    figure, axes = plt.subplots(len(panels), 1, figsize=(9, 5.6), sharex=True, sharey=True)
    samples = range(SAMPLES)
    for axis, (name, before, after, line) in zip(axes, panels, strict=True):
        low = [before[i] for i in samples]
        axis.bar(
            samples, low, color="#4C72B0", label=f"read before the stop (2 processes, {STOP_AFTER} steps)"
        )
        axis.bar(
            samples,
            [after[i] for i in samples],
            bottom=low,
            color="#DD8452",
            label="read after it (3 processes)",
        )
        axis.axhline(1, color="black", linewidth=0.8, linestyle=":")
        axis.set_title(f"{name}\n{textwrap.fill(line, 120)}", fontsize=9, loc="left")
        axis.set_ylabel("reads")
        axis.set_yticks([0, 1, 2])
    axes[-1].set_xlabel("sample index")
    axes[0].legend(loc="upper right", fontsize=8, ncol=2, bbox_to_anchor=(1, 1.55))
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    panels = []
    for name, run in (
        ("lightning_shard: resumed from the saved position", resume_exactly),
        ("a loader without a position: the epoch restarted", restart_epoch),
    ):
        before, after, padding = run()
        line = audit(before, after, padding)
        print(f"{name}: {line}")
        panels.append((name, before, after, line))
    draw(panels, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
