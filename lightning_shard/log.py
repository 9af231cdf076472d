"""lightning_shard's own logger, ``logging.getLogger("lightning_shard")``: the plan line, the notices and the
warnings, each from rank zero only, set up as Lightning sets up ``"lightning.pytorch"`` (docs/DESIGN.md, "Logs
and warnings"). A warning stays a Python warning of its category, issued only while the logger lets
``WARNING`` through: ``setLevel(logging.ERROR)`` silences everything of ours.
"""

from __future__ import annotations

import logging
import os
import warnings

import torch.distributed as dist

logger = logging.getLogger("lightning_shard")
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
"""Where a launcher puts the rank before the process group exists (Lightning reads the same ones)."""


def process_rank() -> int:
    """This process's global rank: the process group's, else the launcher's variable, else 0."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


info = logger.info
"""Log a message (a plan line, a notice) at ``INFO``, from rank zero."""


def warn(message: str, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """Issue ``message`` as a warning of ``category`` from rank zero, unless the logger is set above ``WARNING``
    (``stacklevel`` counts from the caller, as for ``warnings.warn``)."""
    if process_rank() == 0 and logger.isEnabledFor(logging.WARNING):
        warnings.warn(message, category, stacklevel=stacklevel + 1)


logger.setLevel(logging.INFO)
logger.addFilter(lambda record: process_rank() == 0)
# NOTE: as `lightning.pytorch` does: if the root logger has handlers, its records go there (and pytest's
# capture sees them); otherwise a handler of its own, so that the plan line shows by default.
if not logging.getLogger().hasHandlers():
    logger.addHandler(logging.StreamHandler())
    logger.propagate = False
