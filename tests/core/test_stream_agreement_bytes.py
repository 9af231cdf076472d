"""The stream end agreement's bytes per fetch do not grow with the number of processes, counted by
``benchmarks/bench_scale.py``'s stand-in for ``torch.distributed`` playing rank ``N - 1`` of ``N`` up to
16,384 (docs/DESIGN.md, "Scale"); ``tests/loaders/test_stream_agreement.py`` counts them on real processes.
"""

from __future__ import annotations

import pytest

from benchmarks.bench_scale import stream_epoch_received

PER_FETCH = 2 * 8
"""Two int64 per fetch: shares ended, shares empty."""


@pytest.mark.parametrize("world", [8, 1024, 16384])
def test_every_fetch_costs_the_same_bytes_at_any_number_of_processes(world: int) -> None:
    one, three = stream_epoch_received(world, 1), stream_epoch_received(world, 3)
    report = 8 * (3 * world + 1)
    assert three - one == 2 * PER_FETCH, "a fetch where no share ends"
    assert one - report == 2 * PER_FETCH, "a fetch, then one where every share ends"
