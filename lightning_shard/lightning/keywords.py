"""Unknown keywords refused when a ``Shard*`` strategy is built, naming the closest known one: Lightning
would pass them on to torch's wrapper only when the fit sets the model up (docs/DESIGN.md, "Options")."""

from __future__ import annotations

import difflib
import inspect
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_NOT_OURS_TO_PASS = frozenset({"self", "module"})
"""Parameters a parent fills itself (``module``: the model the wrapper wraps)."""


SET_BY_THE_STRATEGY = {
    "dataloader": "the strategy shards each loader the trainer is given",
    "device": "the strategy sets this from the process group (each process's device)",
    "num_processes": "the strategy sets this from the process group",
    "process_index": "the strategy sets this from the process group",
    "torch_device_mesh": "the strategy sets this from the process group (and its device mesh)",
}
"""``prepare_data_loader``'s parameters that are not options, and where a strategy takes each from: passed
to a strategy, they would otherwise be taken for a misspelt ``process_group`` or ``device_mesh``."""


def parameter_names(function: Callable[..., Any]) -> list[str]:
    """The names ``function`` takes by keyword (its ``**kwargs`` and ``self`` excluded)."""
    parameters = inspect.signature(function).parameters.values()
    return [p.name for p in parameters if p.kind in _NAMED and p.name not in _NOT_OURS_TO_PASS]


def check_keywords(strategy: type, passed: Mapping[str, Any], parents: Sequence[Callable[..., Any]]) -> None:
    """Refuse (``TypeError``, with the closest known name) a keyword of ``passed``, those the ``__init__`` of
    ``strategy`` passes on, that none of ``parents`` (the callables they end up in) takes."""
    accepted = {name for parent in parents for name in parameter_names(parent)}
    unknown = [name for name in passed if name not in accepted]
    if not unknown:
        return
    name, owner = unknown[0], strategy.__name__
    owners = " or ".join(f"`{parent.__qualname__.split('.')[0]}`" for parent in parents)
    close = difflib.get_close_matches(name, sorted(set(parameter_names(strategy)) | accepted), n=1)
    fix = (
        f"`{name}` is an argument of `prepare_data_loader`, not an option: {SET_BY_THE_STRATEGY[name]}. Remove it."
        if name in SET_BY_THE_STRATEGY
        else f"Did you mean `{close[0]}`?"
        if close
        else f"Use an option of the options table or an argument of {owners}."
    )
    raise TypeError(
        f"`{owner}` got an unknown keyword argument `{name}={passed[name]!r}`{_look_alike(name)}: it is "
        f"neither an option of `{owner}` nor an argument of {owners}. {fix}"
    )


def _look_alike(name: str) -> str:
    """`` (its ... is not ASCII)`` when ``name`` holds a character that only looks like an ASCII one."""
    foreign = [char for char in name if not char.isascii()]
    if not foreign:
        return ""
    described = ", ".join(f"{char!r} U+{ord(char):04X} {unicodedata.name(char, '?')}" for char in foreign)
    return f" (it holds the non-ASCII {described})"
