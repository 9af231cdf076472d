"""Which Lightning releases the adapter supports, and the check every ``Shard*`` strategy runs
(docs/DESIGN.md, "Supported versions"; ``tests/lightning/test_compat.py`` keeps it in step with
``pyproject.toml``)."""

from __future__ import annotations

import re

import lightning.pytorch as pl

OLDEST_LIGHTNING = (2, 5)
"""The oldest supported Lightning release (major, minor)."""

NEWEST_TESTED_LIGHTNING = (2, 6)
"""The newest Lightning release (major, minor) the suite has passed on."""

WHY_NOT_OLDER = (
    "Lightning before 2.5 restores a checkpoint written at the end of a training batch (as "
    "`ModelCheckpoint(every_n_train_steps=...)` writes them) one batch behind: the resumed epoch's "
    "`batch_idx` and batch count run one behind the samples, and a checkpoint written after the resume "
    "records one step fewer than was consumed, so a second resume repeats it."
)
"""Why releases before ``OLDEST_LIGHTNING`` cannot resume exactly (Lightning 2.5 changed its restart)."""


def supported_range() -> str:
    """The supported releases in words, e.g. ``"2.5 to 2.6"``."""
    return f"{_dotted(OLDEST_LIGHTNING)} to {_dotted(NEWEST_TESTED_LIGHTNING)}"


def install_fix() -> str:
    """The command that installs a supported Lightning release."""
    below = (NEWEST_TESTED_LIGHTNING[0], NEWEST_TESTED_LIGHTNING[1] + 1)
    return f'pip install "lightning>={_dotted(OLDEST_LIGHTNING)},<{_dotted(below)}"'


def check_lightning_version(version: str = pl.__version__) -> None:
    """Refuse a Lightning release older than ``OLDEST_LIGHTNING`` (``RuntimeError`` with the fix); a
    ``version`` whose ``major.minor`` cannot be read (a custom build) is let through."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) >= OLDEST_LIGHTNING:
        return
    raise RuntimeError(
        f"lightning_shard supports Lightning {supported_range()}, but Lightning {version} is installed. "
        f"{WHY_NOT_OLDER} Install a supported release: `{install_fix()}`."
    )


def _dotted(release: tuple[int, int]) -> str:
    return ".".join(map(str, release))
