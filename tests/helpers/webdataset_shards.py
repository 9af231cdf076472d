"""webdataset shards on local disk: consecutive ids in tar files, one file per shard."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Sequence


def write_tars(out: str, lengths: Sequence[int]) -> list[str]:
    """One tar per length under ``out``, of consecutive ids: sample ``i`` has the key ``f"{i:06d}"`` and a file
    ``id`` holding ``i`` in ASCII; returns the shards' paths."""
    os.makedirs(out, exist_ok=True)
    paths, index = [], 0
    for shard, length in enumerate(lengths):
        path = os.path.join(out, f"shard-{shard:05d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for _ in range(length):
                payload = str(index).encode()
                info = tarfile.TarInfo(f"{index:06d}.id")
                info.size, info.mtime, info.mode = len(payload), 0, 0o644
                tar.addfile(info, io.BytesIO(payload))
                index += 1
        paths.append(path)
    return paths


def sample_id(sample: dict[str, object]) -> int:
    """A webdataset sample's id (its ``id`` file), for ``.map``."""
    return int(bytes(sample["id"]).decode())  # type: ignore[arg-type]
