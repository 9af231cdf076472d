"""The source of a stream each process reads its own share of: a natively sharded one (``shard(N, r)``) or
one that splits itself by rank (docs/DESIGN.md, "Streaming data", "Streams that split themselves")."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from lightning_shard.loaders.position import Position, ShardingInfo
from lightning_shard.loaders.source import Batches, StreamSource, moving, rows_of
from lightning_shard.sampling.native_stream import NativeStreamShard


class ShareSource(StreamSource):
    """``shard``, this process's share: the processes agree on when their shares end (``StreamRun``); a
    start mid-epoch reads again and drops the batches the process consumed of its share (continuing in its
    padding where its share had ended), unless the library continues the position itself (its ``SelfSplit``
    was handed the state: the start then skips nothing)."""

    shard: NativeStreamShard

    def batches(self, start: Position) -> Batches:
        loader = self.loader
        rows = rows_of(loader)
        read = functools.partial(self._read, start.workers)
        return self.stream.batches(read(), read, rows, start, moving(loader))

    def _read(self, workers: int | None) -> Iterator[Any]:
        """A pass over the share (the library told first, in this process: ``SelfSplit.before_pass``)."""
        self.shard.before_pass()
        return self.loader.user_batches(workers)

    def length_after(self, base: int) -> int:
        # NOTE: the shares differ in length, so the loader has none (`NativeStreamShard` has no `__len__`).
        return DataLoader.__len__(self.loader)

    def sharding(self) -> ShardingInfo:
        return self.stream_sharding(bool(self.loader.drop_last))
