"""webdataset pipelines that split their shards by node: recognised by their stages, passed through as each
process's own share (docs/DESIGN.md, "Streams that split themselves"). Their ``detshuffle`` stages are set to
the loader's epoch before each pass, so that a padding pass, a pass begun twice or a resumed run reads the
epoch's order; shards resampled with replacement are new draws at every pass, as a run started again draws.
"""

from __future__ import annotations

import functools
from typing import Any

from lightning_shard.sampling.self_split import SelfSplit, defined_in


class WebDatasetSplit(SelfSplit):
    """A webdataset pipeline split by node: its ``detshuffle`` stages follow the loader's epoch."""

    def set_epoch(self, epoch: int) -> None:
        # NOTE: `detshuffle.epoch` is public; `run` adds one before drawing, so it is set one below.
        for stage in _stages(self.dataset):
            if _is_stage(stage, "filters", "detshuffle"):
                stage.epoch = epoch - 1

    def other_count(self, saved: int, now: int) -> str:
        return (
            f"webdataset's `split_by_node` gives each of {saved} processes one shard in {saved}, so a position read on {saved} "
            f"processes has no counterpart on {now}"
        )


def recognise(dataset: Any) -> WebDatasetSplit | None:
    """The ``SelfSplit`` of a webdataset pipeline holding ``split_by_node``, else ``None``."""
    if defined_in(dataset, "webdataset", ("DataPipeline",)) is None:
        return None
    stages = _stages(dataset)
    if not any(_is_stage(_function(stage), "shardlists", "split_by_node") for stage in stages):
        return None
    resampled = any(_is_stage(stage, "shardlists", "ResampledShards") for stage in stages)
    over = " over resampled shards" if resampled else ""
    reason = f"is a webdataset `{type(dataset).__name__}` split by `split_by_node`{over}"
    split = WebDatasetSplit(dataset, reason)
    split.yields_batches = any(_batches(stage) for stage in stages)
    return split


def _batches(stage: Any) -> bool:
    """Whether ``stage`` is webdataset's ``batched`` filter (``.batched(n)`` on a pipeline)."""
    return _is_stage(stage, "filters", "FilterFunction") and getattr(stage.f, "__name__", "") == "_batched"


def _stages(dataset: Any) -> list[Any]:
    return list(getattr(dataset, "pipeline", None) or [])


def _function(stage: Any) -> Any:
    """The function a stage runs: itself, or the function a ``functools.partial`` of it wraps."""
    return stage.func if isinstance(stage, functools.partial) else stage


def _is_stage(stage: Any, module: str, name: str) -> bool:
    """Whether ``stage`` is webdataset's ``module.name`` (a function, or an instance of that class)."""
    named = stage if callable(stage) and hasattr(stage, "__qualname__") else type(stage)
    return (
        getattr(named, "__module__", "") == f"webdataset.{module}" and getattr(named, "__name__", "") == name
    )
