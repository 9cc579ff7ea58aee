"""Training checkpoints a rerun can resume from: written whole or not at all, checked before use.

Why not take speculators' directories as they are: its trainers write a checkpoint in place
(`<save>/<epoch>/`, 0.9 rewrites that same directory at each mid-epoch save), so a process killed
while writing leaves a directory that looks like a checkpoint and is not one, and 0.9 would
overwrite the last good one at the next save of that epoch. Here a save goes to
`<save>/.writing/<epoch>/` (the trainer's own code, its checkpointer pointed there for the call),
its files are fsynced, a marker (`eagle3-complete.json`: every file with its size, the steps) is
written last, and the directory replaces `<save>/<epoch>/` by rename; the one it replaces is kept
as `.old-<epoch>` until the new one is in place.

A checkpoint is taken on resume only when `check` finds nothing wrong: the marker present and
readable, every file it lists there with its size, each `.safetensors` header readable with its
tensors inside the file, each torch `.pt` a readable zip archive. What fails is removed before the
trainer looks (it globs the epoch directories), so the newest complete one is what it resumes from.

Standard library only: the stage checks before importing torch, and tests read it anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARKER = "eagle3-complete.json"
WRITING = ".writing"
OLD = ".old-"
KEY = "key"  # beside the checkpoints: the train stage's key they were written under


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def files_of(d: Path) -> dict[str, int]:
    """Every regular file under d (symlinks left out), by path relative to d, with its size."""
    return {str(p.relative_to(d)): p.stat().st_size for p in sorted(d.rglob("*"))
            if p.is_file() and not p.is_symlink() and p.name != MARKER}


def seal(d: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Write d's marker last: its files and sizes (each fsynced first) and `info` (the steps)."""
    files = files_of(d)
    for name in files:
        _fsync(d / name)
    # No time in it: the marker is one of train's outputs, whose manifest digest must be the
    # same for the same training (the sealing time is the marker's mtime)
    marker = {**info, "files": files}
    tmp = d / (MARKER + ".tmp")
    tmp.write_text(json.dumps(marker, indent=1))
    _fsync(tmp)
    tmp.rename(d / MARKER)
    _fsync(d)
    return marker


def publish(staged: Path, final: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Seal `staged` and put it at `final` (same filesystem): the one it replaces is moved to
    `.old-<name>` first and removed once the new one is in place."""
    marker = seal(staged, info)
    old = final.parent / f"{OLD}{final.name}"
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    staged.rename(final)
    _fsync(final.parent)
    shutil.rmtree(old, ignore_errors=True)
    return marker


def _check_safetensors(path: Path, size: int) -> str:
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return "no safetensors header"
        (n,) = struct.unpack("<Q", head)
        if n <= 0 or 8 + n > size:
            return "safetensors header longer than the file"
        try:
            header = json.loads(f.read(n))
        except ValueError:
            return "safetensors header is not JSON"
    end = max((int(v["data_offsets"][1]) for k, v in header.items()
               if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v),
              default=0)
    return "" if 8 + n + end <= size else "safetensors tensors run past the end of the file"


def _check_torch(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as z:
            if not any(n.endswith("data.pkl") for n in z.namelist()):
                return "not a torch archive (no data.pkl)"
    except (zipfile.BadZipFile, OSError) as exc:
        return f"not a readable torch archive ({exc})"
    return ""


def check(d: Path) -> tuple[dict[str, Any] | None, str]:
    """(marker, '') for a complete checkpoint directory, else (None, what is wrong)."""
    try:
        marker = json.loads((d / MARKER).read_text())
    except FileNotFoundError:
        return None, f"no {MARKER} (its write never finished)"
    except (OSError, ValueError) as exc:
        return None, f"{MARKER} unreadable ({exc})"
    files = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(files, dict) or not files:
        return None, f"{MARKER} lists no files"
    for name, size in files.items():
        p = d / name
        try:
            got = p.stat().st_size
        except OSError:
            return None, f"{name} is missing"
        if got != size:
            return None, f"{name} is {got} bytes, {size} when it was written"
        why = (_check_safetensors(p, got) if name.endswith(".safetensors")
               else _check_torch(p) if name.endswith(".pt") else "")
        if why:
            return None, f"{name}: {why}"
    return marker, ""


def epoch_dirs(save: Path) -> list[Path]:
    """The trainer's checkpoint directories (named by epoch number), newest first."""
    if not save.is_dir():
        return []
    return sorted((p for p in save.iterdir() if p.is_dir() and not p.is_symlink()
                   and p.name.isdigit()), key=lambda p: int(p.name), reverse=True)


def newest(save: Path, say: Callable[[str], None] = lambda _m: None
           ) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete checkpoint under `save` and its marker, after removing every one that
    is not complete (each said in one line through `say`): an interrupted save's staging, and a
    directory whose marker or files do not check. A rename cut between its two steps (the new
    directory not yet in place, the old one set aside) gets the old one back."""
    if not save.is_dir():
        return None
    shutil.rmtree(save / WRITING, ignore_errors=True)
    for old in save.glob(f"{OLD}*"):
        final = save / old.name[len(OLD):]
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.rename(final)
    for d in epoch_dirs(save):
        marker, why = check(d)
        if marker is not None:
            return d, marker
        say(f"checkpoint {d} not taken: {why}; removed")
        shutil.rmtree(d)
    return None


def resume_dir(output_dir: Path, key: str, *, force: bool, say: Callable[[str], None]) -> Path:
    """Where the train stage keeps its checkpoints across runs (`<output_dir>/.train.resume/`,
    outside the stage's temporary directory, which a failed run loses): kept while the stage's
    key (config sections and inputs) is the same, started over on a new key or `force`."""
    d = output_dir / ".train.resume"
    kept = (d / KEY).read_text().strip() if (d / KEY).is_file() else ""
    if d.exists() and (force or kept != key):
        if epoch_dirs(d / "checkpoints"):
            say("starting training over: " + ("forced (--force / --from train): the "
                "checkpoints of the earlier run are removed" if force else "the config or "
                "the inputs changed since the checkpoints were written: they are removed"))
        shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / KEY).write_text(key + "\n")
    return d
