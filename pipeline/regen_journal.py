"""The regeneration journal: one JSON line per finished conversation (regenerated, or skipped
with its reason), appended and fsync'd as each finishes, so a prepare killed at any point (kill
-9, a reboot) resumes with every conversation it finished and never asks the server for one of
them again.

Prepare itself is not a resumable stage (it writes into a temporary directory that a failure
discards), so the journal lives beside the stage's directory: `<output_dir>/regenerate/`, one
file per stage key (`journal-<key16>.jsonl`). A changed config or dataset is another key and
starts a fresh journal; journals of other keys are removed then. A torn last line (the process
died mid-write) is cut off on open: that conversation is generated again, once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class Journal:
    def __init__(self, directory: Path, key: str, *, fresh: bool = False) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"journal-{key[:16]}.jsonl"
        for other in directory.glob("journal-*.jsonl"):
            if other != self.path:
                other.unlink()
        if fresh and self.path.exists():
            self.path.unlink()
        self.records: dict[int, dict[str, Any]] = self._load()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _load(self) -> dict[int, dict[str, Any]]:
        """The finished conversations by index; a torn or unreadable tail is truncated away."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        records: dict[int, dict[str, Any]] = {}
        good = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                rec = json.loads(line)
                index = int(rec["i"])
            except (ValueError, KeyError, TypeError):
                break
            records[index] = rec
            good += len(line)
        if good < len(data):
            with open(self.path, "r+b") as fh:
                fh.truncate(good)
                os.fsync(fh.fileno())
        return records

    def append(self, rec: dict[str, Any]) -> None:
        """One finished conversation, on disk before this returns."""
        line = (json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        os.write(self._fd, line)
        os.fsync(self._fd)
        self.records[int(rec["i"])] = rec

    def close(self) -> None:
        os.close(self._fd)
