"""Files the operator names on the laptop (`report --out`, `bench run --out`, `allreduce
capture --out`): never over a file the console did not write, unless `--force`.

Why one module: a session is user data an earlier run recorded, and a careless `--out` (or a
symlink named like a report that points at the session) used to replace it with HTML. Every
writer of a named path asks `claim()` first, on the *resolved* path (a symlink is judged by what
it points at), and writes with `write_claimed()`, which creates a new file only if none has
appeared since (os.link of a finished temp file: no half-written file, no race with another
writer) and otherwise replaces only what was claimed.

A file counts as the console's own when its writer says so (`ours`): an earlier report carries
the report's generator mark, so `console report S.jsonl` twice rewrites its own page. A
recorded session never counts as the writer's own; the file being read (`source`) is refused
even with --force (writing it would destroy the input before it is read whole).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from remote.errors import OutputRefused

#: The first bytes of a zstd frame and the format name in a session's JSON header (the names
#: console/sessions/header.py writes; remote cannot import console, and a plain scan of the
#: first bytes is all the warning needs).
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SESSION_MARK = b'"eagle3-console-session"'


@dataclass(frozen=True)
class Claimed:
    """The resolved path to write, and whether a file was there when it was judged (only then
    may the write replace one)."""

    path: Path
    existed: bool


def looks_like_session(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith(_ZSTD_MAGIC) or _SESSION_MARK in head.split(b"\n", 1)[0]


def claim(path: Path | str, *, force: bool = False, ours: Callable[[Path], bool] | None = None,
          source: Path | str | None = None, what: str = "output") -> Claimed:
    """The path to write, resolved (symlinks followed), or OutputRefused naming why.

    `ours(resolved)` says whether an existing file is one this writer made before (rewritten
    without --force). `source`: the file the command reads; never written."""
    named = Path(path).expanduser()
    try:
        target = named.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before 3.13)
        raise OutputRefused(f"{what} {named}: cannot resolve the path ({exc})") from None
    via = f" (through the link {named})" if named.is_symlink() else ""
    if source is not None and target == Path(source).expanduser().resolve():
        raise OutputRefused(f"{what} {named} is the session being read{via}; not overwritten: "
                            "give another path")
    if target.is_dir():
        raise OutputRefused(f"{what} {named} is a directory{via}: give a file path")
    if not os.path.lexists(target):
        return Claimed(target, False)
    if force:
        return Claimed(target, True)
    if looks_like_session(target):
        raise OutputRefused(f"{what} {named} is a recorded session{via}; not overwritten "
                            "(give another path, or --force)")
    if ours is not None and ours(target):
        return Claimed(target, True)
    raise OutputRefused(f"{what} {named} already exists{via} and the console did not write it; "
                        "not overwritten (give another path, or --force)")


def fresh(path: Path) -> Path:
    """A default name the console picks: the first of PATH, PATH-2, PATH-3... not taken (two
    runs in one second never share a file)."""
    candidate, n = path, 1
    while os.path.lexists(candidate):
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def write_claimed(claimed: Claimed, data: bytes) -> None:
    """Write `data` where `claim()` allowed: complete or not at all. A target that did not
    exist is created only if it still does not (os.link fails on an existing name)."""
    target = claimed.path
    tmp = target.with_name(f".{target.name}.part-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        if claimed.existed:
            os.replace(tmp, target)
            return
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise OutputRefused(f"{target} appeared while it was being written; not "
                                "overwritten") from None
        except OSError:  # a file system without hard links: create it exclusively instead
            _write_new(target, data)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp)


def _write_new(target: Path, data: bytes) -> None:
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise OutputRefused(f"{target} appeared while it was being written; not "
                            "overwritten") from None
    with open(fd, "wb") as fh:
        fh.write(data)
