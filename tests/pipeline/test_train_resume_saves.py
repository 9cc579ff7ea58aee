"""A trainer that fails while a checkpoint's seal runs in the background (pipeline/trainers/
resume.py `Saves`, background as speculators 0.9's adapter runs it; `training()` is what
pipeline/trainers/cli.py `train_with` wraps the trainer's run in): the seal is ended and its
`checkpoint at step S` line said, a seal that failed is said in an info line, and the
trainer's own error is the one raised. Real saves of the files speculators writes (safetensors,
torch archive), real seals on this disk; the trainer around them runs in
tests/e2e/test_train_ranks.py (speculators 0.9 lives only in the box environments)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from pipeline import checkpoints, progress
from pipeline.trainers import resume

INFO = {"epoch": 0, "local_step": 2, "global_step": 2, "steps_per_epoch": 4, "epochs": 2}


def _save(checkpointer: Any) -> None:
    """The trainer's save as 0.9 writes it, under the path it is given for the call; its model
    big enough (16 MB) that the seal's fsyncs are the disk's time, not a blink."""
    d = Path(checkpointer.path) / "0"
    d.mkdir(parents=True)
    save_file({"w": torch.ones(4 << 20)}, str(d / "model.safetensors"))
    torch.save({"state": {0: {"exp_avg": torch.ones(64)}}}, d / "optimizer_state_dict.pt")
    (d / "training_state.json").write_text(json.dumps({"global_step": INFO["global_step"]}))


def _fail_after_a_save(saves: resume.Saves, save_dir: Path) -> None:
    checkpointer = SimpleNamespace(path=save_dir)
    with pytest.raises(RuntimeError, match=r"^the trainer failed$"), saves.training():
        saves.around(checkpointer, 0, 0, lambda: _save(checkpointer), dict(INFO))
        raise RuntimeError("the trainer failed")


def _records(out: str) -> list[dict[str, Any]]:
    return [r for r in map(progress.parse, out.splitlines()) if r is not None]


def test_a_seal_in_flight_when_the_trainer_fails_is_ended_and_said(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saves = resume.Saves(2, background=True)
    _fail_after_a_save(saves, tmp_path)
    recs = _records(capsys.readouterr().out)
    assert [(r["type"], r.get("checkpoint_step"), r["message"]) for r in recs] == [
        ("info", 2, "checkpoint at step 2 of 8 (epoch 0, step 2 of 4)")]
    marker, why = checkpoints.check(tmp_path / "0")
    assert why == "" and marker is not None and marker["global_step"] == 2
    assert not (tmp_path / checkpoints.WRITING).exists()
    saves.wait()  # nothing left to say twice
    assert _records(capsys.readouterr().out) == []


def test_a_seal_that_fails_too_is_said_and_the_trainers_error_stays_the_one_raised(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The seal cannot move the previous checkpoint aside (a file where its `.old-0` goes,
    which it cannot remove as a directory)."""
    (tmp_path / f"{checkpoints.OLD}0").write_text("in the way")
    saves = resume.Saves(2, background=True)
    _fail_after_a_save(saves, tmp_path)
    recs = _records(capsys.readouterr().out)
    # an info line: the stage's one error line is the trainer's
    assert len(recs) == 1 and recs[0]["type"] == "info" and recs[0]["seal_failed"] == 2, recs
    assert recs[0]["message"].startswith("the checkpoint at step 2 was not sealed "
                                         "(NotADirectoryError: "), recs[0]
    assert recs[0]["message"].endswith("): a rerun resumes from the one before it")
    assert not (tmp_path / "0").exists() and not (tmp_path / checkpoints.WRITING).exists()


def test_a_trainer_that_returns_still_gets_a_failed_seal_raised(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As before: on the way out of a training that ended, the seal's own error is the one."""
    (tmp_path / f"{checkpoints.OLD}0").write_text("in the way")
    saves = resume.Saves(2, background=True)
    checkpointer = SimpleNamespace(path=tmp_path)
    with pytest.raises(NotADirectoryError), saves.training():
        saves.around(checkpointer, 0, 0, lambda: _save(checkpointer), dict(INFO))
    assert _records(capsys.readouterr().out) == []
