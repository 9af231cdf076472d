"""``ShardStrategy``: Lightning's DDP with batch-level sharding, process-scaled schedulers and exact resume."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lightning.pytorch.strategies import DDPStrategy

from lightning_shard.lightning.sharding import ShardingMixin
from lightning_shard.options import ShardOptions, StrategyOptions
from lightning_shard.sampling.balance import EvenBatches
from lightning_shard.sampling.native_stream import IterableSharding


class ShardStrategy(ShardingMixin, DDPStrategy):
    """DDP whose loaders are sharded by ``prepare_data_loader`` instead of Lightning's ``DistributedSampler``.

    Every train / val / test / predict ``DataLoader`` is sharded with this strategy's options (a
    ``ShardDataModule`` can override them per stage): training as configured, validation and test with
    ``even_batches="balanced"`` (no sample repeated, so metrics are exact), predict with ``even_batches=False``
    so each sample is predicted exactly once. Optimizers become ``ShardOptimizer`` and
    ``interval="step"`` schedulers ``ShardScheduler``; the training loader's position is saved in
    Lightning's checkpoints and restored exactly. Registered as ``"shard"`` and ``"shard_spawn"``.

    Keyword arguments: the loader options (``split_batches``, ``even_batches``, ``dispatch_batches``,
    ``put_on_device``, ``rng_types``, ``use_seedable_sampler``, ``data_seed``, ``non_blocking``,
    ``use_stateful_dataloader``, ``slice_fn_for_dispatch``, ``iterable_sharding``, ``scalable_shuffle``)
    are the fields of
    ``ShardOptions``, and the strategy options (``step_scheduler_with_optimizer``, ``audit``,
    ``audit_raise``, ``gather_predictions``) those of ``StrategyOptions``; the options table documents
    both. ``rng_types`` defaults to ``("generator",)`` here.

    Args:
        **kwargs: any ``DDPStrategy`` argument (``find_unused_parameters``, ``timeout``, ``start_method``, ...).
            ``timeout`` (Lightning's default: 30 minutes) bounds how long a process waits for a peer that
            is alive but stuck, and also the start-up rendezvous; a killed peer ends the others at once
            on gloo (see ``benchmarks/RELIABILITY.md``).

    Raises:
        ValueError / TypeError: on inconsistent options (see ``ShardOptions`` and ``StrategyOptions``).
    """

    REGISTERED_NAMES = (("shard", {"start_method": "popen"}), ("shard_spawn", {"start_method": "spawn"}))

    def __init__(
        self,
        *,
        split_batches: bool = False,
        even_batches: EvenBatches = True,
        dispatch_batches: bool | None = None,
        put_on_device: bool = False,
        rng_types: Sequence[str] | None = ("generator",),
        use_seedable_sampler: bool = False,
        data_seed: int | None = None,
        non_blocking: bool = False,
        use_stateful_dataloader: bool = False,
        slice_fn_for_dispatch: Callable[..., Any] | None = None,
        iterable_sharding: IterableSharding = "auto",
        scalable_shuffle: bool = False,
        step_scheduler_with_optimizer: bool = True,
        audit: bool = False,
        audit_raise: bool = False,
        gather_predictions: bool = True,
        **kwargs: Any,
    ) -> None:
        options = locals()
        super().__init__(**kwargs)
        self._init_sharding(ShardOptions.from_kwargs(options), StrategyOptions.from_kwargs(options))
