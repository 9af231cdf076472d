"""The fingerprint a strided stream's processes compare (docs/DESIGN.md, "Streams that split themselves"):
an identifying key is compared where every element has one, so random contents alone never differ there;
anything else is compared whole, so a label or a tag shared by different elements never passes for them."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import default_collate, default_convert

from lightning_shard.sampling.stream_fingerprint import (
    DIGEST_BITS,
    CollateFingerprinted,
    Fingerprinted,
    checked_step,
    fingerprint,
)


def _noise(size: int) -> torch.Tensor:
    return torch.rand(size)


def test_identifying_keys_alone_decide() -> None:
    one = [{"__key__": f"{i:06d}", "jpg": _noise(4), "cls": i % 2} for i in range(6)]
    two = [{**element, "jpg": _noise(4), "cls": 1 - element["cls"]} for element in one]
    assert fingerprint(one).digest == fingerprint(two).digest
    assert not fingerprint(one).by_content
    assert fingerprint(one).shown[0] == "{'__key__': '000000'}"
    assert fingerprint([{"id": 0}]).shown == ("{'id': 0}",), "an id of 0 is shown as written, not pickled"
    assert fingerprint(one).digest != fingerprint([*one[1:], one[0]]).digest, "order matters"


def test_a_shared_label_or_tag_never_stands_for_different_elements() -> None:
    """0.4.0 hashed the discrete values when no key named the element: a label shared by both processes'
    first batches passed for the same stream."""
    first = [(torch.tensor([float(i)]), 0) for i in range(0, 8, 2)]
    second = [(torch.tensor([float(i)]), 0) for i in range(1, 8, 2)]
    assert fingerprint(first).by_content
    assert fingerprint(first).digest != fingerprint(second).digest
    tagged = [{"emb": torch.tensor([float(i)]), "lang": "en"} for i in range(4)]
    other = [{"emb": torch.tensor([float(i)]), "lang": "en"} for i in range(4, 8)]
    assert fingerprint(tagged).digest != fingerprint(other).digest


def test_an_element_without_a_key_makes_the_whole_batch_compared_by_contents() -> None:
    mixed = [{"id": 1, "x": _noise(2)}, {"x": _noise(2)}]
    assert fingerprint(mixed).by_content


def test_contents_are_compared_whole_tensors_and_arrays_by_their_data() -> None:
    images = [torch.randint(0, 255, (3, 4, 4), dtype=torch.uint8) for _ in range(3)]
    assert fingerprint(images).by_content
    assert fingerprint(images).digest == fingerprint([image.clone() for image in images]).digest
    assert fingerprint(images).digest != fingerprint([image.flip(0) for image in images]).digest
    arrays = [np.arange(3) + i for i in range(3)]
    assert fingerprint(arrays).digest != fingerprint([np.arange(3) + i + 1 for i in range(3)]).digest


def test_the_compared_steps_are_the_first_two_then_doubling_intervals() -> None:
    assert [step for step in range(64) if checked_step(step)] == [0, 1, 3, 7, 15, 31, 63]


@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=20))
def test_the_digest_is_a_pure_function_of_the_identities(ids: list[int]) -> None:
    first = fingerprint([{"id": i, "x": _noise(2)} for i in ids])
    assert first.digest == fingerprint([{"id": i} for i in ids]).digest
    assert 0 < first.digest < 2**DIGEST_BITS, "never 0: a fetch without a mark sends 0"
    assert first.digest != fingerprint([{"id": i} for i in [*ids, 0]]).digest


def test_the_collate_carries_the_fingerprint_of_a_batch_or_a_single_element() -> None:
    marked = Fingerprinted(torch.tensor(1), fingerprint([1, 2]))
    batch = CollateFingerprinted(default_collate)([marked, torch.tensor(2)])
    assert type(batch) is Fingerprinted and batch.value.tolist() == [1, 2]
    assert batch.fingerprint == marked.fingerprint
    single = CollateFingerprinted(default_convert)(marked)
    assert type(single) is Fingerprinted and single.value.tolist() == 1
    assert CollateFingerprinted(default_collate)([torch.tensor(3)]).tolist() == [3]
