"""Where a laptop-side tail got to, so a new console process resumes without loss or repeats.

The box's log is the source; the session file the console records is the ledger of what was
received. A cursor file holds the last saved offset and which session file was recording; on
load, any job.line events of that run recorded after the save (the process may have been killed
between recording a line and saving the cursor) move the cursor forward. So a line recorded once
is never recorded again, and a line never recorded is fetched again.

    <state dir>/cursors/<host>/<run-id>.json  {"offset": int, "session": path|null, "session_pos": int}
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import platformdirs

from remote.link.hosts import APP_NAME


def default_cursor_dir() -> Path:
    return Path(platformdirs.user_state_dir(APP_NAME)) / "cursors"


def safe_part(part: str) -> str:
    """A host name or run id as one path component (no separator, no `..`)."""
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in part).strip(".")
    return out or "_"


def write_private_json(path: Path, data: object) -> None:
    """Written whole, then renamed into place; 0600: it names the operator's session files,
    runs and configs, nobody else's business."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
        fh.write(json.dumps(data))
    os.replace(tmp, path)


class CursorStore:
    """`after_recorded`: the recorder's `after_written` when `session` is being recorded. The
    recorder writes on a thread of its own, behind the tail; a save goes through it, so it lands
    only after the lines it covers are in the session, and the offset it names is never past a
    line a kill -9 took from the session."""

    def __init__(self, root: Path | None = None, *, session: Path | None = None,
                 after_recorded: Callable[[Callable[[], None]], None] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cursor_dir()
        self.session = Path(session) if session is not None else None
        self._after_recorded = after_recorded
        # What this process saved, for a load before a deferred save has landed.
        self._saved: dict[tuple[str, str], int] = {}
        self._failed: OSError | None = None

    def path(self, host: str, run_id: str) -> Path:
        return self.root / safe_part(host or "local") / f"{safe_part(run_id)}.json"

    def save(self, host: str, run_id: str, offset: int) -> None:
        if self._failed is not None:  # a deferred save failed: said here, where a save can fail
            failed, self._failed = self._failed, None
            raise failed
        self._saved[host, run_id] = offset
        if self._after_recorded is not None:
            self._after_recorded(lambda: self._save_deferred(host, run_id, offset))
        else:
            self._save_now(host, run_id, offset)

    def _save_deferred(self, host: str, run_id: str, offset: int) -> None:
        try:
            self._save_now(host, run_id, offset)
        except OSError as exc:
            self._failed = exc

    def _save_now(self, host: str, run_id: str, offset: int) -> None:
        pos = 0
        if self.session is not None and not self.session.name.endswith(".zst"):
            try:
                pos = self.session.stat().st_size
            except OSError:
                pos = 0
        write_private_json(self.path(host, run_id), {
            "offset": offset, "session": str(self.session) if self.session else None,
            "session_pos": pos})

    def load(self, host: str, run_id: str) -> int:
        """The offset to resume from (0 when this run was never tailed here)."""
        saved = self._saved.get((host, run_id), 0)
        try:
            data = json.loads(self.path(host, run_id).read_text())
            offset = max(saved, int(data.get("offset", 0)))
        except (OSError, ValueError, TypeError, AttributeError):
            return saved
        session = data.get("session")
        if isinstance(session, str) and not session.endswith(".zst"):
            offset = max(offset, _recorded_offset(Path(session), int(data.get("session_pos") or 0),
                                                  host, run_id))
        return offset


def _recorded_offset(session: Path, start: int, host: str, run_id: str) -> int:
    """The highest job.line offset of this run recorded in session from byte `start` on (a
    job.lines record, a log block written as one record, holds its lines' offsets)."""
    best = 0
    needle = run_id.encode()
    try:
        with open(session, "rb") as fh:
            fh.seek(start)
            for raw in fh:
                if needle not in raw or not raw.endswith(b"\n"):
                    continue  # a torn last line was not recorded
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                if not isinstance(event, dict) or event.get("host", "") != host:
                    continue
                payload = event.get("payload") or {}
                if not isinstance(payload, dict) or payload.get("run_id") != run_id:
                    continue
                if event.get("kind") == "job.line" and isinstance(payload.get("offset"), int):
                    best = max(best, payload["offset"])
                elif event.get("kind") == "job.lines":  # a log block as one record
                    offsets = payload.get("offsets")
                    if isinstance(offsets, list) and offsets and all(
                            isinstance(o, int) for o in offsets):
                        best = max(best, *offsets)
    except OSError:
        return 0
    return best
