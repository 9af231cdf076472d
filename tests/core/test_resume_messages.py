"""A state that cannot continue in this loader is refused in the terms the user set: the option
(``dispatch_batches``, ``use_seedable_sampler``, ``scalable_shuffle``), not the saved internals (``mode``,
the sampler's class), and the fix says how to start the epoch afresh under Lightning too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from lightning_shard import prepare_data_loader
from lightning_shard.loaders.state import STATE_VERSION


def prepared(**options: Any) -> Any:
    data = DataLoader(range(20), batch_size=4, shuffle=True)
    return prepare_data_loader(data, num_processes=2, process_index=0, **options)


def saved_state(**options: Any) -> dict[str, Any]:
    """The state of a loader prepared with ``options``, saved after one batch."""
    loader = prepared(**options)
    next(iter(loader))
    return loader.state_dict()


def refusal(loader: Any, state: dict[str, Any]) -> str:
    with pytest.raises(ValueError) as refused:
        loader.load_state_dict(state)
    return str(refused.value)


BETWEEN_EPOCHS = "`trainer.fit(ckpt_path=...)` with a checkpoint written between epochs"
WITHOUT_STATE = (
    "`trainer.fit` without `ckpt_path`, the weights loaded with `LightningModule.load_from_checkpoint`"
)


def test_a_changed_dispatch_batches_is_named() -> None:
    # NOTE: a dispatcher needs a process group; its saved state differs from a shard loader's in `mode` only.
    message = refusal(prepared(), {**saved_state(), "mode": "dispatch"})
    assert "saved with `dispatch_batches=True`, but this loader has `dispatch_batches=False`" in message
    assert "mode" not in message and WITHOUT_STATE in message


@pytest.mark.parametrize(
    ("saved", "here", "named"),
    [
        ({"use_seedable_sampler": True}, {}, ("use_seedable_sampler=True", "use_seedable_sampler=False")),
        ({}, {"use_seedable_sampler": True}, ("use_seedable_sampler=False", "use_seedable_sampler=True")),
        ({"scalable_shuffle": True}, {}, ("scalable_shuffle=True", "scalable_shuffle=False")),
        (
            {"scalable_shuffle": True},
            {"use_seedable_sampler": True},
            ("scalable_shuffle=True", "use_seedable_sampler=True"),
        ),
    ],
)
def test_a_changed_sampler_option_is_named(
    saved: dict[str, Any], here: dict[str, Any], named: tuple[str, str]
) -> None:
    message = refusal(prepared(**here), saved_state(**saved))
    assert f"saved with `{named[0]}`, but this loader has `{named[1]}`" in message
    assert "Sampler'" not in message, "the sampler's class is an internal name"
    assert BETWEEN_EPOCHS in message


def test_a_sampler_that_is_no_option_keeps_its_class_name() -> None:
    sequential = prepare_data_loader(DataLoader(range(20), batch_size=4), num_processes=2, process_index=0)
    message = refusal(sequential, saved_state())
    assert (
        "saved with `sampler='RandomSampler'`, but this loader has `sampler='SequentialSampler'`" in message
    )


def test_starting_afresh_says_how_under_lightning_and_the_way_it_names_works() -> None:
    """A state of another sampler is refused mid-epoch only, so a checkpoint written between epochs is the
    fix; one of another batch size (or version) is refused between epochs too, so the fix is not to load it."""
    seeded = saved_state(use_seedable_sampler=True)
    assert BETWEEN_EPOCHS in refusal(prepared(), seeded)
    between_epochs = prepared(use_seedable_sampler=True)
    list(between_epochs)
    prepared().load_state_dict(between_epochs.state_dict())  # loads: the fix the message names works

    other_batch_size = prepare_data_loader(
        DataLoader(range(20), batch_size=8, shuffle=True), num_processes=2, process_index=0
    )
    finished = prepared()
    list(finished)
    for state in (saved_state(), finished.state_dict(), {**saved_state(), "version": STATE_VERSION + 1}):
        loader = prepared() if state.get("version") != STATE_VERSION else other_batch_size
        message = refusal(loader, state)
        assert "start the epoch afresh" in message and WITHOUT_STATE in message
        assert BETWEEN_EPOCHS not in message, "a state saved between epochs is refused as well"


def test_a_webdataset_state_of_0_3_strided_says_the_release_changed_how_it_is_read(tmp_path: Any) -> None:
    """0.3.0 strided a webdataset pipeline split by node; 0.4 reads each process's own part. Its mid-epoch
    state cannot continue, and the refusal says that the release changed, not the user's loader."""
    import webdataset as wds

    from tests.helpers.webdataset_shards import sample_id, write_tars

    shards = write_tars(str(tmp_path), [6, 6, 6, 6])
    pipeline = wds.WebDataset(shards, nodesplitter=wds.split_by_node, shardshuffle=False).map(sample_id)
    loader = prepare_data_loader(DataLoader(pipeline, batch_size=3), num_processes=2, process_index=0)
    legacy = (Path(__file__).parents[1] / "data" / "legacy" / "0.3.0" / "stream_strided.json").read_text()
    state = {**json.loads(legacy)["state"], "dataset_length": None}
    message = refusal(loader, state)
    assert "saved mid-epoch from a stream read as 'iterable'" in message, message
    assert "webdataset" in message and "the release changed how this dataset is read" in message, message
    assert "Build the loader as it was" not in message, "that cannot be done"
