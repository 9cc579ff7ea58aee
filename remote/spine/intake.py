"""The one judgement of a record that comes from outside: is its payload what its kind says?

Records reach the console from places it does not control: a job's log (`@@eagle3` stage
records, a model's text, a user's script), a session file (written by any release, copied,
truncated, edited), a bench result. Each enters at one point (remote/jobs/stage_records.py,
console/sessions/decode.py, console/report/page.py) and is judged there by the kind's schema
(remote/spine/event_types.py: SCHEMAS), the one definition of a valid payload: a record that
does not match is not passed on. Its reader turns it into ONE warning naming where it was
(a record's line number, a log's byte offset) and goes on with the next, so a consumer
downstream (a reducer, the printer, the report) never meets a field of the wrong type.

Kinds without a schema pass (a producer added on another branch; older sessions keep
replaying), and so do fields a schema does not name (kept in the payload).
"""

from __future__ import annotations

from typing import Any

import msgspec

from remote.spine.event_types import SCHEMAS


def problem(kind: str, payload: Any) -> str | None:
    """Why `payload` is not a valid `kind` payload (one line), or None when it is (or when
    the kind has no schema)."""
    schema = SCHEMAS.get(kind)
    if schema is None:
        return None
    if not isinstance(payload, dict):
        return f"{kind} payload is {type(payload).__name__}, not an object"
    try:
        msgspec.convert(payload, schema)
    except msgspec.ValidationError as exc:
        return f"{kind} payload does not match its schema: {exc}"
    return None


def line_number(index: int) -> int:
    """A session record's line in its file (1-based; the header is line 1): what a warning
    names, so `sed -n Np` shows the record."""
    return index + 2


def corrupt(index: int, why: str) -> str:
    """The one warning a reader gives for a damaged session record (docs/sessions.md, Damage):
    its position and its line in the file."""
    return f"event {index} is corrupt and was skipped (line {line_number(index)}): {why}"
