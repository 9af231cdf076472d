"""The API reference (docs/reference.md, rendered by mkdocstrings) documents every public name of the
package, and every public method and property of the loaders, inherited ones included: each is documented
on the class of ours that defines it, which the reference must render with that member."""

from __future__ import annotations

import inspect
import re
from pydoc import locate

import pytest

import lightning_shard
from tests.docs.blocks import DOCS

REFERENCE = DOCS / "reference.md"
LOADERS = [
    lightning_shard.DataLoaderShard,
    lightning_shard.DataLoaderDispatcher,
    lightning_shard.StatefulDataLoaderShard,
    lightning_shard.StatefulDataLoaderDispatcher,
]
DUNDERS = {"__len__"}
"""Special methods whose meaning differs from ``DataLoader``'s (``len()`` counts the steps taken before a
resume); iteration is what each loader's own docstring describes."""


def directives(text: str) -> dict[str, list[str] | None]:
    """``::: name`` of the page, each with its ``members:`` list (``None``: mkdocstrings' default)."""
    found: dict[str, list[str] | None] = {}
    for match in re.finditer(r"^::: (\S+)\n((?:    .*\n)*)", text, re.M):
        members = re.search(r"^      members:\n((?:        - .*\n)+)", match[2], re.M)
        found[match[1]] = re.findall(r"- (\S+)", members[1]) if members else None
    return found


def _qualified(klass: type) -> str:
    return f"{klass.__module__}.{klass.__qualname__}"


def public_members(klass: type) -> dict[str, type]:
    """Each public method or property of ``klass`` that a class of ours defines, with that class."""
    owners: dict[str, type] = {}
    for owner in reversed(klass.__mro__):
        if not owner.__module__.startswith("lightning_shard"):
            continue
        for name, value in vars(owner).items():
            wanted = not name.startswith("_") or name in DUNDERS
            if wanted and (inspect.isfunction(value) or isinstance(value, property)):
                owners[name] = owner
    return owners


def undocumented(klass: type, page: dict[str, list[str] | None]) -> list[str]:
    """The members of ``klass`` that no directive of ``page`` renders."""
    documented = {_qualified(locate(name)): members for name, members in page.items()}  # type: ignore[arg-type]
    missing = []
    for name, owner in public_members(klass).items():
        members = documented.get(_qualified(owner), [])
        shown = name in members if members is not None else not name.startswith("_")
        if not shown:
            missing.append(f"{owner.__qualname__}.{name}")
    return missing


def _page() -> dict[str, list[str] | None]:
    return directives(REFERENCE.read_text())


def test_every_public_name_is_in_the_reference() -> None:
    rendered = {_qualified(locate(name)) for name in _page()}  # type: ignore[arg-type]
    for name in lightning_shard.__all__:
        value = getattr(lightning_shard, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert _qualified(value) in rendered, f"`lightning_shard.{name}` is not in docs/reference.md"


@pytest.mark.parametrize("loader", LOADERS, ids=lambda loader: loader.__name__)
def test_every_public_loader_member_is_in_the_reference(loader: type) -> None:
    members = public_members(loader)
    assert {"state_dict", "load_state_dict", "set_epoch", "__len__", "remainder"} <= set(members)
    assert undocumented(loader, _page()) == []


def test_a_member_left_out_is_found() -> None:
    page = _page()
    page["lightning_shard.loaders.base.ResumableLoader"] = ["state_dict"]
    missing = undocumented(lightning_shard.DataLoaderShard, page)
    assert "ResumableLoader.load_state_dict" in missing and "ResumableLoader.__len__" in missing
