"""Checkpoints a rerun resumes from (issue 51, pipeline/checkpoints.py): sealed whole, checked
before use. Real files of the formats speculators writes (a safetensors file, a torch zip
archive, as torch.save writes them); the trainer itself runs in tests/e2e/test_train_ranks.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipeline import checkpoints


def _write(d: Path, step: int) -> Path:
    """A checkpoint directory as speculators leaves one (model, optimizer, training state)."""
    d.mkdir(parents=True)
    save_file({"w": torch.full((16, 16), float(step))}, str(d / "model.safetensors"))
    torch.save({"state": {0: {"exp_avg": torch.ones(64)}}}, d / "optimizer_state_dict.pt")
    (d / "training_state.json").write_text(json.dumps({"global_step": step}))
    return d


def _publish(save: Path, epoch: int, step: int) -> dict[str, object]:
    staged = _write(save / checkpoints.WRITING / str(epoch), step)
    return checkpoints.publish(staged, save / str(epoch), {"epoch": epoch, "global_step": step,
                                                           "local_step": 0,
                                                           "steps_per_epoch": 4})


def test_a_published_checkpoint_checks_and_is_the_newest(tmp_path: Path) -> None:
    _publish(tmp_path, 0, 4)
    _publish(tmp_path, 1, 8)
    said: list[str] = []
    found = checkpoints.newest(tmp_path, said.append)
    assert found is not None and found[0] == tmp_path / "1" and found[1]["global_step"] == 8
    assert said == []
    # Publishing the same epoch again replaces it whole.
    _publish(tmp_path, 1, 7)
    found = checkpoints.newest(tmp_path)
    assert found is not None and found[1]["global_step"] == 7
    assert not list(tmp_path.glob(".old-*"))


def test_a_torn_checkpoint_is_never_taken(tmp_path: Path) -> None:
    """Every way a write can be cut: no marker, a file shorter than sealed, a safetensors
    header that runs past the file, an optimizer archive cut short, the staging of a save that
    never finished. Each is removed with one line; the one before is taken."""
    _publish(tmp_path, 0, 4)
    cases = {
        "no marker": lambda d: (d / checkpoints.MARKER).unlink(),
        "short file": lambda d: _truncate(d / "optimizer_state_dict.pt", 100),
    }
    for why, tear in cases.items():
        _publish(tmp_path, 1, 8)
        tear(tmp_path / "1")
        said: list[str] = []
        found = checkpoints.newest(tmp_path, said.append)
        assert found is not None and found[0].name == "0", why
        assert len(said) == 1 and "checkpoint" in said[0] and "not taken" in said[0], said
        assert not (tmp_path / "1").exists()
    # Sizes as sealed but the contents not what they claim (the marker of a copy gone wrong).
    _publish(tmp_path, 1, 8)
    st = tmp_path / "1" / "model.safetensors"
    data = bytearray(st.read_bytes())
    data[:8] = struct.pack("<Q", len(data))  # a header longer than the file
    st.write_bytes(bytes(data))
    assert "safetensors header" in checkpoints.check(tmp_path / "1")[1]
    _publish(tmp_path, 1, 8)
    _publish_over(tmp_path / "1", "optimizer_state_dict.pt", b"x" * 300)
    assert "torch archive" in checkpoints.check(tmp_path / "1")[1]
    # A save killed before its seal: its staging directory, never read, removed.
    _write(tmp_path / checkpoints.WRITING / "2", 12)
    found = checkpoints.newest(tmp_path)
    assert found is not None and found[0].name == "0"
    assert not (tmp_path / checkpoints.WRITING).exists()


def _truncate(p: Path, n: int) -> None:
    p.write_bytes(p.read_bytes()[:n])


def _publish_over(d: Path, name: str, data: bytes) -> None:
    """Replace a file and re-seal, so that only the content check can tell."""
    (d / name).write_bytes(data)
    (d / checkpoints.MARKER).unlink()
    checkpoints.seal(d, {"epoch": 1, "global_step": 8})


def test_a_rename_cut_halfway_gets_the_old_checkpoint_back(tmp_path: Path) -> None:
    _publish(tmp_path, 0, 4)
    (tmp_path / "0").rename(tmp_path / f"{checkpoints.OLD}0")  # killed between the renames
    found = checkpoints.newest(tmp_path)
    assert found is not None and found[0] == tmp_path / "0"


def test_the_resume_dir_is_kept_for_its_key_and_started_over_when_forced(tmp_path: Path) -> None:
    said: list[str] = []
    d = checkpoints.resume_dir(tmp_path, "k1", force=False, say=said.append)
    _publish(d / "checkpoints", 0, 4)
    assert checkpoints.resume_dir(tmp_path, "k1", force=False, say=said.append) == d
    assert (d / "checkpoints" / "0").is_dir() and said == []
    checkpoints.resume_dir(tmp_path, "k2", force=False, say=said.append)
    assert not (d / "checkpoints").exists() and "config or the inputs changed" in said[-1]
    _publish(d / "checkpoints", 0, 4)
    checkpoints.resume_dir(tmp_path, "k2", force=True, say=said.append)
    assert not (d / "checkpoints").exists() and said[-1].startswith("starting training over: "
                                                                     "forced")
