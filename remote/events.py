"""The one event stream every producer and consumer of the console shares.

Events are plain data so that a recorded session can be replayed into the same consumers as a
live box: the TUI cannot tell the two apart except by a badge.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import repeat
from json.encoder import encode_basestring_ascii as _escape
from typing import Any, overload

from remote import bulk

# Known kinds, grouped by producer. Kinds are open strings (new producers add their own), but the
# ones consumers rely on are named here so a typo shows up in review, not in a replay.
CONNECTION_UP = "connection.up"
CONNECTION_DOWN = "connection.down"
CONNECTION_RETRY = "connection.retry"
CONSOLE_INFO = "console.info"
CONSOLE_WARNING = "console.warning"
CONSOLE_ERROR = "console.error"
MARKER = "marker"
PROBE_RESULT = "probe.result"
PROBE_ERROR = "probe.error"
JOB_STARTED = "job.started"
JOB_LINE = "job.line"
JOB_EXIT = "job.exit"
JOB_STATUS = "job.status"  # a run record (console jobs --json list/status): RunInfo fields
STAGE_START = "stage.start"
STAGE_PROGRESS = "stage.progress"
STAGE_END = "stage.end"
STAGE_SKIPPED = "stage.skipped"
UPLOAD_PROGRESS = "upload.progress"
PATCH_PLANNED = "patch.planned"
PATCH_APPLIED = "patch.applied"
PATCH_VERIFIED = "patch.verified"
PATCH_ROLLED_BACK = "patch.rolled_back"
STATS_SAMPLE = "stats.sample"
ALLREDUCE_RESULT = "allreduce.result"
BENCH_POINT = "bench.point"
BENCH_SUMMARY = "bench.summary"
BENCH_WATCH = "bench.watch"  # acceptance over one scrape interval of `console bench watch`
SERVE_STARTING = "serve.starting"  # a vLLM server job launched (role, url, run_id)
SERVE_READY = "serve.ready"  # it answers /v1/models (role, url, run_id, seconds)
SERVE_FAILED = "serve.failed"  # it died or never answered (role, error, log_tail)
SERVE_STOPPED = "serve.stopped"  # cancelled by the console (role, run_id, state)

# Kinds a replay can seek to ("markers"): where a human wants to jump in a long session.
SEEKABLE_KINDS = frozenset(
    {MARKER, STAGE_START, STAGE_END, PATCH_APPLIED, PATCH_ROLLED_BACK, BENCH_SUMMARY, JOB_EXIT}
)


def utc_now() -> datetime:
    """Millisecond precision: what the session format stores, so a round-trip is exact."""
    now = datetime.now(UTC)
    return now.replace(microsecond=(now.microsecond // 1000) * 1000)


_last_ts: tuple[datetime, str] | None = None


def format_ts(ts: datetime) -> str:
    """Fixed-width ISO form (24 chars) so timestamps compare as strings and sit at a fixed
    offset in a session line, which is what lets the index seek by time without parsing JSON.

    The last result is kept: a burst of events (a job's log lines) shares one timestamp, and
    strftime per event was the largest cost of recording a fast log."""
    global _last_ts
    last = _last_ts
    if last is not None and last[0] is ts:
        return last[1]
    utc = ts if ts.tzinfo is UTC else ts.astimezone(UTC)
    text = utc.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
    _last_ts = (ts, text)
    return text


def parse_ts(text: str) -> datetime:
    if not text.endswith("Z"):
        raise ValueError(f"timestamp {text!r} is not UTC (no trailing Z)")
    return datetime.strptime(text[:-1], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    host: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    ts: datetime = field(default_factory=utc_now)

    def to_json(self) -> str:
        # "ts" first and fixed-width: the session index reads it at a known byte offset.
        return (
            '{"ts":"'
            + format_ts(self.ts)
            + '","host":'
            + _encode_str(self.host)
            + ',"kind":'
            + _encode_str(self.kind)
            + ',"payload":'
            + (_encode_flat(self.payload) or _ENCODER.encode(self.payload))
            + "}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"ts": format_ts(self.ts), "host": self.host, "kind": self.kind,
                "payload": self.payload}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        try:
            kind = data["kind"]
            ts = parse_ts(data["ts"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an event: missing {exc}") from None
        payload = data.get("payload") or {}
        if not isinstance(kind, str) or not isinstance(payload, dict):
            raise ValueError("not an event: kind must be a string and payload an object")
        return cls(kind=kind, host=str(data.get("host", "")), payload=payload, ts=ts)

    @classmethod
    def from_json(cls, line: str | bytes) -> Event:
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError("not an event: a JSON object was expected")
        return cls.from_dict(data)


class JobLines(Sequence[Event]):
    """The job.line events of one block of a job's log, published together (bus.publish_many).

    Its items are ordinary Events, one per line, built at once (remote/bulk.py). The batch also
    keeps the columns they were built from, so the recorder encodes the whole block in one pass
    with the parts every line shares (ts, host, kind, run_id, name) encoded once: byte for byte
    what each Event.to_json gives, which tests/test_events.py checks on awkward text. Like any
    Event, the payloads are not to be changed by consumers."""

    __slots__ = ("_events", "_head", "_offsets", "_texts")

    def __init__(self, host: str, run_id: str, name: str, texts: Sequence[str],
                 offsets: Sequence[int], ts: datetime | None = None) -> None:
        if len(texts) != len(offsets):
            raise ValueError(f"{len(texts)} lines but {len(offsets)} offsets")
        ts = ts or utc_now()
        payloads = [{"run_id": run_id, "name": name, "text": text, "offset": offset}
                    for text, offset in zip(texts, offsets, strict=True)]
        self._events: tuple[Event, ...] = tuple(bulk.build(Event, len(payloads), {
            "kind": repeat(JOB_LINE), "host": repeat(host), "payload": payloads, "ts": repeat(ts),
        }))
        self._texts = texts
        self._offsets = offsets
        # Everything before a line's text, from a real event so it cannot drift from to_json.
        template = Event(JOB_LINE, host, {"run_id": run_id, "name": name, "text": "",
                                          "offset": 0}, ts).to_json()
        assert template.endswith(_TEMPLATE_END), template
        self._head = template[: -len(_TEMPLATE_END)]

    def __len__(self) -> int:
        return len(self._events)

    @overload
    def __getitem__(self, i: int) -> Event: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Event, ...]: ...

    def __getitem__(self, i: int | slice) -> Event | tuple[Event, ...]:
        return self._events[i]

    def __iter__(self) -> Iterator[Event]:
        return iter(self._events)

    def to_jsonl(self) -> str:
        """Every event's to_json() followed by a newline, concatenated."""
        if not self._events:
            return ""
        head = self._head
        return "".join([f'{head}{_escape(text)},"offset":{offset}}}}}\n'
                        for text, offset in zip(self._texts, self._offsets, strict=True)])


_TEMPLATE_END = '"","offset":0}}'


def _encode_str(text: str) -> str:
    return _STR_CACHE.get(text) or _cache_str(text)


def _cache_str(text: str) -> str:
    encoded = json.dumps(text)
    if len(_STR_CACHE) < 4096:  # hosts and kinds: a handful of distinct strings
        _STR_CACHE[text] = encoded
    return encoded


_STR_CACHE: dict[str, str] = {}


def _encode_flat(payload: dict[str, Any]) -> str | None:
    """A payload of only str and int values (job.line), encoded as json.dumps would with
    separators=(",", ":"), about twice as fast; None for anything else."""
    parts = []
    for key, value in payload.items():
        prefix = _KEY_CACHE.get(key)
        if prefix is None:
            prefix = _escape(key) + ":"
            if len(_KEY_CACHE) < 4096:
                _KEY_CACHE[key] = prefix
        kind = type(value)
        if kind is str:
            parts.append(prefix + _escape(value))
        elif kind is int:
            parts.append(prefix + int.__repr__(value))
        else:
            return None
    return "{" + ",".join(parts) + "}"


_KEY_CACHE: dict[str, str] = {}


def _json_default(obj: Any) -> Any:
    """Payloads come from probes and stages; tolerate the few non-JSON types they produce."""
    if isinstance(obj, datetime):
        return format_ts(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "__fspath__"):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable in an event payload")


# One encoder for every payload: json.dumps with non-default separators builds a new encoder per
# call, which dominated the cost of recording a fast job log. Same output as json.dumps(
# payload, separators=(",", ":"), default=_json_default).
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_json_default)
