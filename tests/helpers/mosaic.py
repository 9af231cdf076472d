"""mosaicml-streaming's core (``StreamingDataset``, ``MDSWriter``), imported without its package ``__init__``.

``streaming/__init__.py`` imports the library's vision and text datasets, hence ``torchvision`` and
``transformers``; neither is installed here (the registry's ``torchvision`` for torch 2.13 is a CUDA build that
does not load beside the CPU torch, so the Makefile installs mosaicml-streaming without its dependencies, as
LitData). Its core needs neither, so the two packages ``streaming`` and ``streaming.base`` are registered as
plain packages of the installed files, without running their ``__init__``, and the core modules import as
they are: the classes the tests use are the library's own, unchanged. A process that unpickles a dataset
(a ``DataLoader`` worker started by ``spawn``) must have called ``streaming_core()`` first, so the tests fork
their workers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
import types
from pathlib import Path
from typing import Any


def _package(name: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not installed (the Makefile installs mosaicml-streaming)")
    module = types.ModuleType(name)
    module.__path__ = list(spec.submodule_search_locations)
    module.__spec__ = spec
    module.__file__ = spec.origin
    module.__package__ = name
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def _mapped_shared_memory() -> set[str]:
    """The names under ``/dev/shm`` that some process has mapped now."""
    names = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            names.update(re.findall(r"/dev/shm/(\S+)", maps.read_text()))
    return names


def remove_stale_shared_memory() -> None:
    """Remove the library's shared memory (``/dev/shm/NNNNNN_*``) that no process maps: what a killed run left.

    The library takes the first prefix whose set of segments is incomplete and creates them, so a partial set
    left by a run that was killed makes every later dataset fail with ``FileExistsError``. A segment in use is
    mapped by the process that holds it, so it is kept; on a machine without ``/dev/shm`` this does nothing.
    """
    segments = list(Path("/dev/shm").glob("[0-9]" * 6 + "_*"))
    in_use = _mapped_shared_memory() if segments else set()
    for path in segments:
        if path.name not in in_use:
            with contextlib.suppress(OSError):
                path.unlink()


def streaming_core() -> tuple[type, type]:
    """``(StreamingDataset, MDSWriter)`` of the installed mosaicml-streaming; the first call in a process
    removes the shared memory killed runs left (``remove_stale_shared_memory``)."""
    if "streaming" not in sys.modules:
        remove_stale_shared_memory()
    _package("streaming")
    _package("streaming.base")
    from streaming.base.dataset import StreamingDataset
    from streaming.base.format.mds.writer import MDSWriter

    return StreamingDataset, MDSWriter


def write_mds(out: str, samples: int, per_shard: int) -> str:
    """An MDS dataset in ``out`` of the ids ``0 .. samples - 1`` (columns ``id`` and ``key``), ``per_shard`` a
    shard (the library deals samples, not shards, to the ranks: the shards' sizes do not change who reads what)."""
    _, writer_class = streaming_core()
    with writer_class(
        out=out, columns={"id": "int", "key": "str"}, size_limit=1 << 20, compression=None
    ) as writer:
        # NOTE: every sample encodes to as many bytes, so this limit closes a shard every `per_shard` samples.
        sample = len(writer.encode_sample({"id": 0, "key": "000000"})) + writer.extra_bytes_per_sample
        writer.size_limit = writer.extra_bytes_per_shard + per_shard * sample
        for index in range(samples):
            writer.write({"id": index, "key": f"{index:06d}"})
    with open(os.path.join(out, "index.json")) as index_file:
        counts = [shard["samples"] for shard in json.load(index_file)["shards"]]
    assert sum(counts) == samples and max(counts) == per_shard, counts
    return out


def mosaic_dataset(local: str, rank: int, world_size: int, **kwargs: Any) -> Any:
    """A ``StreamingDataset`` over ``local`` built as rank ``rank`` of ``world_size`` on one machine (the
    environment ``torchrun`` gives: the library reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` when a
    dataset is built). The variables are given back as they were afterwards: other code of the process reads
    them too (accelerate's ``PartialState`` would start a process group)."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(zip(names, map(str, (rank, world_size, rank, world_size)), strict=True))
    try:
        dataset_class, _ = streaming_core()
        return dataset_class(local=local, **kwargs)
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
