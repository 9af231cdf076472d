"""Import another checkout of ``lightning_shard`` (a release) beside this one, for side-by-side benchmarks.

Only the benchmarks use this; the package knows nothing of it. The other checkout's modules are imported
under their own names while this checkout's are set aside in ``sys.modules``, then put back: the modules
imported from the release keep their own globals, so its objects keep calling its own code.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

_PACKAGE = "lightning_shard"


def _ours(name: str) -> bool:
    return name == _PACKAGE or name.startswith(_PACKAGE + ".")


def import_release(checkout: str, module: str) -> types.ModuleType:
    """``lightning_shard.<module>`` of the checkout at ``checkout`` (a worktree of a release).

    ``module`` and what it imports are loaded, without running the release's ``__init__`` (which would
    register its Lightning strategies a second time). NOTE: an import inside a function of the release runs
    later, against this checkout's modules; the only one in 0.1's core (``stateful_loader_class``, reached
    with ``use_stateful_dataloader=True``) is not reached by the benchmarks.

    Raises:
        ValueError: when ``checkout`` holds no ``lightning_shard`` package.
    """
    root = Path(checkout).resolve() / _PACKAGE
    if not (root / "__init__.py").is_file():
        raise ValueError(
            f"`--against {checkout}` holds no `{_PACKAGE}` package. Pass the root of a checkout of a release, "
            "e.g. a worktree made with `git worktree add /work/wt01 6c385d5`."
        )
    ours = {name: sys.modules.pop(name) for name in [name for name in sys.modules if _ours(name)]}
    try:
        package = types.ModuleType(_PACKAGE)
        package.__path__ = [str(root)]
        package.__file__ = str(root / "__init__.py")
        sys.modules[_PACKAGE] = package
        return importlib.import_module(f"{_PACKAGE}.{module}")
    finally:
        for name in [name for name in sys.modules if _ours(name)]:
            del sys.modules[name]
        sys.modules.update(ours)
