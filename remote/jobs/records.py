"""What the box-side helper reports about a run, read on the laptop: the run record (RunInfo)
and one log line with its resume offset (the refusals and errors a job operation ends with are
in remote/errors.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import msgspec

from remote.errors import JobHelperError
from remote.spine.events import Event

EXIT_LOCKED = 75  # remote/jobs/helper.py
State = Literal["running", "exited", "cancelled", "lost"]


@dataclass(slots=True)
class RunInfo:
    run_id: str
    name: str
    argv: list[str]
    pid: int | None
    started: str
    state: State
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
        """Checked against the fields' types (msgspec): a record the helper did not write
        whole is one line here, not a crash further on."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            raise JobHelperError(f"malformed run record from the box: {exc}") from None


class LogLine(msgspec.Struct, frozen=True, gc=False):
    text: str
    offset: int  # byte offset in the log just after this line
    event: Event | None = None  # a stage record's, as the tail published it: read, not parsed


def parse_record(line: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise JobHelperError(f"{what}: the box printed {line[:200]!r}, not a run record")
    return data
