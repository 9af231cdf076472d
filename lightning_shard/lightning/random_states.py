"""The callback every ``Shard*`` strategy adds: each process's random states in each checkpoint, restored
when the fit resumes on as many processes (``comm/random_states.py``; docs/DESIGN.md, "Random states on
resume")."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from typing_extensions import override

from lightning_shard.comm.random_states import gather_states, own_state, random_streams_notice, restore


class ShardRandomStatesCallback(Callback):
    """Saves every process's random states; a resumed fit restores its own before its first step.

    NOTE: restored at the first ``on_train_batch_start``, after Lightning rebuilt the loaders and read
    ahead, so that nothing between the restore and the training step draws from them (the loaders'
    main-process draws are kept apart, ``loaders/main_draws.py``).
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    @property
    @override
    def state_key(self) -> str:
        return "lightning_shard.random_states"

    @override
    def state_dict(self) -> dict[str, Any]:
        # NOTE: a collective: Lightning writes a checkpoint from every process (process 0's is saved).
        return gather_states()

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = own_state(state_dict)
        if self._pending is None and state_dict:
            rank_zero_info(random_streams_notice(state_dict))

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._pending is not None:
            restore(self._pending)
            self._pending = None
