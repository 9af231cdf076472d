"""The fingerprint a strided stream's processes compare (docs/DESIGN.md, "Streams that split themselves"):
what identifies an element is compared where something does, so random contents alone never differ."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import default_collate, default_convert

from lightning_shard.sampling.stream_fingerprint import CollateFingerprinted, Fingerprinted, fingerprint


def _noise(size: int) -> torch.Tensor:
    return torch.rand(size)


def test_identifying_keys_alone_decide() -> None:
    one = [{"__key__": f"{i:06d}", "jpg": _noise(4), "cls": i % 2} for i in range(6)]
    two = [{**element, "jpg": _noise(4), "cls": 1 - element["cls"]} for element in one]
    assert fingerprint(one).digest == fingerprint(two).digest
    assert not fingerprint(one).by_content
    assert fingerprint(one).shown[0] == "(('__key__', '000000'),)"
    assert fingerprint(one).digest != fingerprint([*one[1:], one[0]]).digest, "order matters"


def test_discrete_values_decide_when_no_key_names_the_element() -> None:
    labelled = [(_noise(3), i, torch.tensor([i, i + 1])) for i in range(5)]
    augmented = [(_noise(3), i, torch.tensor([i, i + 1])) for i in range(5)]
    assert fingerprint(labelled).digest == fingerprint(augmented).digest
    other = [(_noise(3), i + 1, torch.tensor([i, i + 1])) for i in range(5)]
    assert fingerprint(labelled).digest != fingerprint(other).digest


def test_images_and_floats_are_contents_not_identities() -> None:
    images = [torch.randint(0, 255, (3, 4, 4), dtype=torch.uint8) for _ in range(3)]
    assert fingerprint(images).by_content, "a 3-d uint8 image names nothing: it may be augmented"
    assert fingerprint(images).digest == fingerprint([image.clone() for image in images]).digest
    assert fingerprint(images).digest != fingerprint([image.flip(0) for image in images]).digest
    arrays = [np.arange(3) + i for i in range(3)]
    assert not fingerprint(arrays).by_content, "a 1-d integer array is an identity (token ids)"


@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=20))
def test_the_digest_is_a_pure_function_of_the_identities(ids: list[int]) -> None:
    first = fingerprint([{"id": i, "x": _noise(2)} for i in ids])
    assert first.digest == fingerprint([{"id": i} for i in ids]).digest
    assert 0 <= first.digest < 2**62
    assert first.digest != fingerprint([{"id": i} for i in [*ids, 0]]).digest


def test_the_collate_carries_the_fingerprint_of_a_batch_or_a_single_element() -> None:
    marked = Fingerprinted(torch.tensor(1), fingerprint([1, 2]))
    batch = CollateFingerprinted(default_collate)([marked, torch.tensor(2)])
    assert type(batch) is Fingerprinted and batch.value.tolist() == [1, 2]
    assert batch.fingerprint == marked.fingerprint
    single = CollateFingerprinted(default_convert)(marked)
    assert type(single) is Fingerprinted and single.value.tolist() == 1
    assert CollateFingerprinted(default_collate)([torch.tensor(3)]).tolist() == [3]
