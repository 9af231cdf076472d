"""The way back to plain Lightning (docs/guides/resume.md, "Back to plain Lightning"): a checkpoint
written under ``ShardStrategy`` on 2 processes, converted by ``python -m lightning_shard.lightning.to_plain``,
resumed by ``Trainer(strategy="ddp")`` on 2 processes in which ``lightning_shard`` cannot be imported
(``tests/scripts/to_plain.py``, ``tests/scripts/plain_fit.py``)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_shard.lightning import to_plain_checkpoint
from lightning_shard.lightning.to_plain import main
from tests.helpers.runner import run_command, script

pytestmark = pytest.mark.lightning

STOP_AT = 3
"""``tests/scripts/to_plain.py`` checkpoints its fit of 50 samples in batches of 4 after 3 steps."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("to_plain")
    run_command(script("to_plain", str(out)), timeout=300)
    saved = out / "checkpoints" / f"step={STOP_AT}.ckpt"
    converted = out / "plain.ckpt"
    command = [sys.executable, "-m", "lightning_shard.lightning.to_plain", str(saved), str(converted)]
    (out / "cli.txt").write_text(run_command(command, timeout=120))
    for name, checkpoint in (("ours", saved), ("plain", converted)):
        run_command(script("plain_fit", str(checkpoint), str(out / name)), timeout=300)
    return out


def test_plain_lightning_refuses_our_checkpoint_as_it_is(runs: Path) -> None:
    """The message the Troubleshooting page quotes."""
    message = (runs / "ours" / "error_rank0.txt").read_text()
    assert "The CombinedLoader has 0 stateful loaders, but found 1 states in the checkpoint" in message


def test_the_command_says_what_it_removed(runs: Path) -> None:
    output = (runs / "cli.txt").read_text()
    assert f"Wrote {runs / 'plain.ckpt'}: a plain Lightning checkpoint." in output
    assert "the training loaders' positions (1 loader state(s) of the fit loop)" in output
    assert "'lightning_shard.random_states'" in output and "'ShardAuditCallback'" in output


def test_plain_ddp_resumes_a_converted_checkpoint_and_trains(runs: Path) -> None:
    saved = torch.load(runs / "checkpoints" / f"step={STOP_AT}.ckpt", weights_only=True)
    for rank in (0, 1):
        end = json.loads((runs / "plain" / f"end_rank{rank}.json").read_text())
        record = json.loads((runs / "plain" / f"fit_rank{rank}.json").read_text())
        assert end["ours"] == [], "lightning_shard was never imported"
        assert end["start_weight"] == saved["state_dict"]["layer.weight"].flatten().tolist(), "the model"
        assert end["end_weight"] != end["start_weight"], "it trained"
        # DistributedSampler: 25 samples per process, 7 batches an epoch; epoch 0 goes on after batch 3.
        batches = [(epoch, batch_idx) for epoch, batch_idx, _ in record["train"]]
        assert batches == [(0, i) for i in range(STOP_AT, 7)] + [(1, i) for i in range(7)], (
            "the loop progress"
        )
        assert end["global_step"] == STOP_AT + 4 + 7
        # The scheduler goes on from the 6 steps it took (ShardStrategy: 2 per optimizer step), one a step.
        assert record["lr"][0] == [STOP_AT + 1, pytest.approx(0.1 / (1 + 7))], "the scheduler's state"


def test_the_converted_checkpoint_keeps_the_model_optimizer_and_progress(runs: Path) -> None:
    saved = torch.load(runs / "checkpoints" / f"step={STOP_AT}.ckpt", weights_only=True)
    plain = torch.load(runs / "plain.ckpt", weights_only=True)
    assert saved["state_dict"].keys() == plain["state_dict"].keys()
    assert all(torch.equal(saved["state_dict"][k], plain["state_dict"][k]) for k in saved["state_dict"])
    for key in ("epoch", "global_step", "optimizer_states", "lr_schedulers"):
        assert plain[key] == saved[key], key
    fit_loop = {key: value for key, value in saved["loops"]["fit_loop"].items() if key != "state_dict"}
    assert {
        key: value for key, value in plain["loops"]["fit_loop"].items() if key != "state_dict"
    } == fit_loop
    assert "combined_loader" not in plain["loops"]["fit_loop"]["state_dict"]
    assert set(saved["callbacks"]) - set(plain["callbacks"]) == {
        "lightning_shard.random_states",
        "ShardAuditCallback",
    }


def test_converting_twice_removes_nothing_more_in_place(runs: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.ckpt"
    shutil.copy(runs / "plain.ckpt", again)
    assert to_plain_checkpoint(again, again) == []


def test_what_cannot_be_converted_is_refused_by_name(runs: Path, tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(FileNotFoundError, match="`source`: no checkpoint at"):
        to_plain_checkpoint(tmp_path / "missing.ckpt", tmp_path / "out.ckpt")
    with pytest.raises(ValueError, match="is a directory: a sharded checkpoint"):
        to_plain_checkpoint(tmp_path, tmp_path / "out.ckpt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "tensors.pt")
    with pytest.raises(ValueError, match="is not a Lightning checkpoint"):
        to_plain_checkpoint(tmp_path / "tensors.pt", tmp_path / "out.ckpt")
    torch.save({"state_dict": {}, "hyper_parameters": {"path": Path("x")}}, tmp_path / "objects.ckpt")
    with pytest.raises(
        ValueError, match="pass `weights_only=False` \\(on the command line, `--no-weights-only`\\)"
    ):
        to_plain_checkpoint(tmp_path / "objects.ckpt", tmp_path / "out.ckpt")
    main([str(tmp_path / "objects.ckpt"), str(tmp_path / "out.ckpt"), "--no-weights-only"])
    assert "Removed: nothing (no lightning_shard state found)." in capsys.readouterr().out
