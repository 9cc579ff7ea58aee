"""What the box-side helper reports about a run, read on the laptop: the run record (RunInfo)
and one log line with its resume offset (the refusals and errors a job operation ends with are
in remote/errors.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import msgspec

from remote.errors import JobHelperError

EXIT_LOCKED = 75  # remote/jobs/helper.py
STATES = ("running", "exited", "cancelled", "lost")


@dataclass(slots=True)
class RunInfo:
    run_id: str
    name: str
    argv: list[str]
    pid: int | None
    started: str
    state: str  # "running" | "exited" | "cancelled" | "lost"
    returncode: int | None
    ended: str | None
    log_path: str
    log_size: int

    @property
    def done(self) -> bool:
        return self.state != "running"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunInfo:
        try:
            state = str(data["state"])
            if state not in STATES:
                raise ValueError(f"unknown state {state!r}")
            argv = data.get("argv") or []
            if not isinstance(argv, list):
                raise ValueError("argv is not a list")
            pid = data.get("pid")
            rc = data.get("returncode")
            return cls(
                run_id=str(data["run_id"]),
                name=str(data.get("name", "")),
                argv=[str(a) for a in argv],
                pid=int(pid) if pid is not None else None,
                started=str(data.get("started", "")),
                state=state,
                returncode=int(rc) if rc is not None else None,
                ended=str(data["ended"]) if data.get("ended") else None,
                log_path=str(data.get("log_path", "")),
                log_size=int(data.get("log_size", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise JobHelperError(f"malformed run record from the box: {exc}") from None


class LogLine(msgspec.Struct, frozen=True, gc=False):
    text: str
    offset: int  # byte offset in the log just after this line


def parse_record(line: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except ValueError:
        raise JobHelperError(f"{what}: the box printed {line[:200]!r}, not a run record") from None
    if not isinstance(data, dict):
        raise JobHelperError(f"{what}: the box printed {line[:200]!r}, not a run record")
    return data
