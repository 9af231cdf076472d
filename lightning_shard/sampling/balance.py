"""The ``even_batches="balanced"`` tail: the end of an epoch split into real samples only (docs/DESIGN.md,
"Exact evaluation"). The last global batch is cut into ``N`` contiguous chunks in rank order, sizes differing
by at most one; one of fewer than ``N`` samples is merged with the global batch before it first.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

BALANCED = "balanced"

EvenBatches: TypeAlias = bool | Literal["balanced"]
"""``True``: pad; ``False``: no padding, possibly uneven step counts; ``"balanced"``: see above."""


def check_even_batches(value: Any) -> EvenBatches:
    """Return ``value`` if it is ``True``, ``False`` or ``"balanced"``.

    Raises:
        TypeError: on anything else (a string such as ``"false"`` would silently mean ``True``).
    """
    if isinstance(value, bool):
        return value
    if value == BALANCED:
        return "balanced"
    raise TypeError(
        f"`even_batches` must be True, False or 'balanced', got {value!r} ({type(value).__name__}). Pass "
        "`even_batches=True` (pad the last step), `False` (no padding) or `'balanced'` (split the last step)."
    )


def is_balanced(even_batches: EvenBatches, length: int, num_processes: int) -> bool:
    """Whether an epoch of ``length`` samples gets a balanced tail (else it is padded or left uneven)."""
    return even_batches == BALANCED and length >= num_processes


def tail_steps(length: int, span: int, num_processes: int) -> tuple[int, int]:
    """``(full steps, tail length)`` of a balanced epoch of ``length`` samples in global batches of ``span``."""
    full, rest = divmod(length, span)
    if rest == 0 or rest >= num_processes:
        return full, rest
    return full - 1, span + rest


def chunk(tail_length: int, num_processes: int, process_index: int) -> tuple[int, int]:
    """``[lo, hi)``: process ``process_index``'s contiguous part of a tail of ``tail_length`` samples."""
    base, extra = divmod(tail_length, num_processes)
    lo = process_index * base + min(process_index, extra)
    return lo, lo + base + (process_index < extra)
