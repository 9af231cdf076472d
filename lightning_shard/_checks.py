"""Argument checks shared by the core: each error names the parameter, the value and the fix."""

from __future__ import annotations

from typing import Any


def check_num_processes(num_processes: Any) -> int:
    """Return ``num_processes`` if it is an integer of at least 1."""
    fix = "the number of data-parallel processes, e.g. `num_processes=2`"
    _check_int("num_processes", num_processes, "an integer", fix)
    if num_processes < 1:
        raise ValueError(
            f"`num_processes` must be at least 1, got {num_processes}. Pass the number of data-parallel "
            "processes, e.g. `num_processes=2` (`prepare_data_loader` also takes `None`: the size of the "
            "running torch.distributed group)."
        )
    return num_processes


def check_process_index(process_index: Any, num_processes: int) -> int:
    """Return ``process_index`` if it lies in ``[0, num_processes)``."""
    fix = f"this process's data-parallel rank, between 0 and {num_processes - 1}"
    _check_int("process_index", process_index, "an integer", fix)
    if not 0 <= process_index < num_processes:
        raise ValueError(
            f"`process_index` must be in [0, {num_processes}) for `num_processes={num_processes}`, "
            f"got {process_index}. Pass this process's data-parallel rank, between 0 and {num_processes - 1}."
        )
    return process_index


def check_split_batch_size(batch_size: int | None, num_processes: int, where: str) -> int:
    """Return the per-process slice length of a global batch of ``batch_size`` under ``split_batches``."""
    if batch_size is None:
        raise ValueError(
            f"`split_batches=True` needs the batch size of the {where}, but it has none (`batch_size=None`). "
            "Use a batch sampler with a `batch_size` attribute, or set `split_batches=False`."
        )
    if batch_size % num_processes != 0:
        lower = (batch_size // num_processes) * num_processes
        upper = lower + num_processes
        options = f"{lower} or {upper}" if lower > 0 else f"{upper}"
        raise ValueError(
            f"`split_batches=True` needs the batch size ({batch_size}) to be a multiple of the number of "
            f"processes ({num_processes}). Use a batch size of {options}, or set `split_batches=False`."
        )
    return batch_size // num_processes


def check_non_negative(name: str, value: Any, fix: str | None = None) -> int:
    """Return ``value`` if it is a non-negative integer; ``fix`` says what to pass instead (by default, for
    a skip parameter: a whole number, 0 to skip nothing)."""
    what = "a non-negative integer"
    _check_int(name, value, what, fix or f"a whole number, e.g. `{name}=0` to skip nothing")
    if value < 0:
        raise ValueError(f"`{name}` must be {what}, got {value}. Pass {fix or '0 to skip nothing'}.")
    return value


def check_positive(name: str, value: Any, fix: str) -> int:
    """Return ``value`` if it is an integer of at least 1; ``fix`` says what to pass instead."""
    _check_int(name, value, "a positive integer", fix)
    if value < 1:
        raise ValueError(f"`{name}` must be at least 1, got {value}. Pass {fix}.")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool: a string such as ``"false"`` would silently mean ``True``."""
    if not isinstance(value, bool):
        raise TypeError(
            f"`{name}` must be True or False, got {value!r} ({type(value).__name__}). "
            f"Pass `{name}=True` or `{name}=False`."
        )
    return value


def check_seed(name: str, value: Any) -> int | None:
    """Return ``value`` if it is ``None`` or an integer seed."""
    if value is None:
        return None
    return _check_int(name, value, "an integer seed or None", f"e.g. `{name}=1234`")


def _check_int(name: str, value: Any, what: str, fix: str) -> int:
    """Return ``value`` if it is an integer (a bool is not one); else a ``TypeError`` saying ``what`` to pass:
    "`name` must be <what>, got <value> (<type>). Pass <fix>."."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be {what}, got {value!r} ({type(value).__name__}). Pass {fix}.")
    return value
