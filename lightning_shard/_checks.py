"""Argument checks shared by the core: each error names the parameter, the value and the fix."""

from __future__ import annotations

from typing import Any


def check_num_processes(num_processes: Any) -> int:
    """Return ``num_processes`` if it is an integer of at least 1."""
    if isinstance(num_processes, bool) or not isinstance(num_processes, int):
        raise TypeError(
            f"`num_processes` must be an integer, got {num_processes!r} ({type(num_processes).__name__}). "
            "Pass the number of data-parallel processes, e.g. `num_processes=2`."
        )
    if num_processes < 1:
        raise ValueError(
            f"`num_processes` must be at least 1, got {num_processes}. Pass the number of data-parallel "
            "processes, e.g. `num_processes=2` (`prepare_data_loader` also takes `None`: the size of the "
            "running torch.distributed group)."
        )
    return num_processes


def check_process_index(process_index: Any, num_processes: int) -> int:
    """Return ``process_index`` if it lies in ``[0, num_processes)``."""
    if isinstance(process_index, bool) or not isinstance(process_index, int):
        raise TypeError(
            f"`process_index` must be an integer, got {process_index!r} ({type(process_index).__name__}). "
            f"Pass this process's data-parallel rank, between 0 and {num_processes - 1}."
        )
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
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"`{name}` must be a non-negative integer, got {value!r} ({type(value).__name__}). "
            f"Pass {fix or f'a whole number, e.g. `{name}=0` to skip nothing'}."
        )
    if value < 0:
        raise ValueError(
            f"`{name}` must be a non-negative integer, got {value}. Pass {fix or '0 to skip nothing'}."
        )
    return value


def check_positive(name: str, value: Any, fix: str) -> int:
    """Return ``value`` if it is an integer of at least 1; ``fix`` says what to pass instead."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be a positive integer, got {value!r} ({type(value).__name__}). {fix}")
    if value < 1:
        raise ValueError(f"`{name}` must be at least 1, got {value}. {fix}")
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
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"`{name}` must be an integer seed or None, got {value!r} ({type(value).__name__}). "
            f"Pass e.g. `{name}=1234`."
        )
    return value
