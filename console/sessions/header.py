"""The session file's header: what makes a file a session.

A session is JSON lines: this header (format, version, start time, hosts, console version,
whether secrets were masked), then one event per line. The writer (console/sessions/writer.py)
writes the header and the reader (console/sessions/reader.py) checks it; both live here so the
format's name, its version and the one-line messages for a file that is not a session are in
one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from console.errors import SessionFormatError
from remote.spine.events import parse_ts

FORMAT = "eagle3-console-session"
VERSION = 1


@dataclass(frozen=True, slots=True)
class SessionHeader:
    started: datetime
    hosts: list[str]
    console_version: str
    redact: bool | None = None  # None: a session from before redaction (issue 33)


def parse_header(path: Path, first: bytes, *, complete: bool) -> SessionHeader:
    """The header in a session's first line, or SessionFormatError naming what is wrong."""
    not_session = f"{path}: not a console session file"
    try:
        data = json.loads(first)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise SessionFormatError(f"{not_session} (first line is not a JSON header)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SessionFormatError(f"{not_session} (no '{FORMAT}' header)")
    if data.get("version") != VERSION:
        raise SessionFormatError(
            f"{path}: session format version {data.get('version')} is not supported "
            f"(this console reads version {VERSION})"
        )
    if not complete:
        raise SessionFormatError(f"{path}: header line is incomplete")
    try:
        started = parse_ts(data["started"])
    except (KeyError, ValueError, TypeError, AttributeError):
        raise SessionFormatError(f"{path}: header has no valid 'started' time") from None
    hosts = data.get("hosts") or []
    return SessionHeader(
        started=started,
        hosts=[str(h) for h in hosts] if isinstance(hosts, list) else [],
        console_version=str(data.get("console_version", "?")),
        redact=data["redact"] if isinstance(data.get("redact"), bool) else None,
    )
