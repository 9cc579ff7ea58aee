"""The one event stream every producer and consumer of the console shares.

Events are plain data so that a recorded session can be replayed into the same consumers as a
live box: the TUI cannot tell the two apart except by a badge.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, overload

import msgspec

from remote.errors import PayloadError, RecordError
from remote.spine import event_types as et

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
# A session RECORD, not an event: a block of job.line events stored once (JobLines.to_records);
# every reader expands it back (expand_record), so no consumer of the bus ever sees this kind.
JOB_LINES = "job.lines"
JOB_EXIT = "job.exit"
JOB_STATUS = "job.status"  # a run record (console jobs --json list/status): RunInfo fields
STAGE_START = "stage.start"
STAGE_PROGRESS = "stage.progress"
STAGE_END = "stage.end"
STAGE_SKIPPED = "stage.skipped"
STAGE_NOT_RUN = "stage.not_run"  # not reached by the box runner (an earlier failure, a cancel)
STAGE_MANIFEST = "stage.manifest"  # a stage's manifest as the box has it (plan)
PIPELINE_RUN = "pipeline.run"  # the box runner this console follows (started/attached/reattached)
UPLOAD_PROGRESS = "upload.progress"
PATCH_PLANNED = "patch.planned"
PATCH_APPLIED = "patch.applied"
PATCH_VERIFIED = "patch.verified"
PATCH_ROLLED_BACK = "patch.rolled_back"
STATS_SAMPLE = "stats.sample"
STATS_ALERT = "stats.alert"  # an incident an alert rule saw in the samples (remote/stats/alerts.py)
ALLREDUCE_RESULT = "allreduce.result"
BENCH_POINT = "bench.point"
BENCH_SUMMARY = "bench.summary"
BENCH_WATCH = "bench.watch"  # acceptance over one scrape interval of `console bench watch`
BENCH_MATRIX = "bench.matrix"  # `console bench matrix`: its plan, each cell measured (with progress and ETA), its end
SERVE_STARTING = "serve.starting"  # a vLLM server job launched (role, url, run_id)
SERVE_READY = "serve.ready"  # it answers /v1/models (role, url, run_id, seconds)
SERVE_FAILED = "serve.failed"  # it died or never answered (role, error, log_tail)
SESSION_REDACTIONS = "session.redactions"  # secrets masked in this session (last record)
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
    when = datetime.fromisoformat(text)  # ~30x faster than strptime; Python 3.11 reads the Z
    if when.tzinfo is not UTC:
        when = when.astimezone(UTC)
    return when


def validate(kind: str, payload: dict[str, Any]) -> et.Payload | None:
    """The typed payload of a known kind (raises PayloadError when it does not match), or None
    for a kind without a schema (new producers may add kinds before they add a schema)."""
    schema = et.SCHEMAS.get(kind)
    if schema is None:
        return None
    try:
        return msgspec.convert(payload, schema)
    except msgspec.ValidationError as exc:
        raise PayloadError(f"{kind} event: {exc}") from None


def typed(kind: str, payload: dict[str, Any]) -> et.Payload | None:
    """Like validate, but None for a payload that does not match (old or damaged sessions)."""
    try:
        return validate(kind, payload)
    except PayloadError:
        return None


def to_payload(data: et.Payload) -> dict[str, Any]:
    """The wire form of a typed payload: the fields that are set (None and empty defaults are
    left out, so a sample stays small)."""
    out: dict[str, Any] = msgspec.to_builtins(data)
    return {k: v for k, v in out.items() if v is not None}


class Event(msgspec.Struct, frozen=True, gc=False):
    """The envelope every event shares. `payload` is the wire form (a dict: what a session file
    holds, also for kinds and fields this console does not know); `data()` is the typed view
    (remote/spine/event_types.py). Not tracked by the cyclic GC (gc=False): a fast job log makes
    thousands a second, and a payload never refers back to its event."""

    kind: str
    host: str = ""
    payload: dict[str, Any] = msgspec.field(default_factory=dict)
    ts: datetime = msgspec.field(default_factory=utc_now)

    @classmethod
    def of(cls, data: et.Payload, host: str = "", ts: datetime | None = None) -> Event:
        """The event of a typed payload: how new producers (and test doubles) build one."""
        return cls(data.KIND, host, to_payload(data), ts or utc_now())

    @classmethod
    def checked(cls, kind: str, host: str = "", payload: dict[str, Any] | None = None,
                ts: datetime | None = None) -> Event:
        """An event whose payload was validated against its kind's schema (PayloadError if it
        does not match): the path of `bus.emit(kind, host, **fields)`."""
        payload = payload or {}
        validate(kind, payload)
        return cls(kind, host, payload, ts or utc_now())

    def data(self) -> et.Payload | None:
        """The typed payload; None for a kind without a schema or a payload that does not match
        it (a damaged or much older session): consumers skip those."""
        return typed(self.kind, self.payload)

    def to_json(self) -> str:
        # "ts" first and fixed-width: the session index reads it at a known byte offset.
        return _ENCODER.encode(_Wire(format_ts(self.ts), self.host, self.kind,
                                     self.payload)).decode("utf-8")

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
        try:
            wire = _DECODER.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError):
            # Not the common shape (NaN, a non-string host, an older writer): the generic path,
            # which accepts what json does and says what is wrong.
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("not an event: a JSON object was expected") from None
            return cls.from_dict(data)
        return cls(wire.kind, wire.host, wire.payload, parse_ts(wire.ts))


class _Wire(msgspec.Struct):
    """The line form: field order is the byte layout of a session line (ts first). A line
    without one of them takes the generic path (Event.from_dict)."""

    ts: str
    host: str
    kind: str
    payload: dict[str, Any]


class JobLines(Sequence[Event]):
    """The job.line events of one block of a job's log, published together (bus.publish_many),
    so the recorder writes the whole block with one write (one job.lines record).

    The events are built when first asked for: the recorder and a block-at-a-time fold read
    only the columns (texts, offsets) and what the lines share, and building an Event per
    line was most of the cost of folding a replayed block."""

    __slots__ = ("_events", "_host", "_name", "_offsets", "_run_id", "_texts", "_ts")

    def __init__(self, host: str, run_id: str, name: str, texts: Sequence[str],
                 offsets: Sequence[int], ts: datetime | None = None) -> None:
        if len(texts) != len(offsets):
            raise ValueError(f"{len(texts)} lines but {len(offsets)} offsets")
        self._host, self._run_id, self._name = host, run_id, name
        self._ts = ts or utc_now()
        # The columns, copied (a producer may reuse its lists): to_records and to_jsonl encode
        # what every line shares once.
        self._texts = tuple(texts)
        self._offsets = tuple(offsets)
        self._events: tuple[Event, ...] | None = None

    def _event(self, i: int) -> Event:
        return Event(JOB_LINE, self._host, {"run_id": self._run_id, "name": self._name,
                                            "text": self._texts[i],
                                            "offset": self._offsets[i]}, self._ts)

    def _all(self) -> tuple[Event, ...]:
        if self._events is None:
            host, run_id, name, ts = self._host, self._run_id, self._name, self._ts
            self._events = tuple([
                Event(JOB_LINE, host, {"run_id": run_id, "name": name, "text": text,
                                       "offset": offset}, ts)
                for text, offset in zip(self._texts, self._offsets, strict=True)])
        return self._events

    def __len__(self) -> int:
        return len(self._texts)

    @overload
    def __getitem__(self, i: int) -> Event: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Event, ...]: ...

    def __getitem__(self, i: int | slice) -> Event | tuple[Event, ...]:
        if isinstance(i, slice) or self._events is not None:
            return self._all()[i]
        n = len(self._texts)
        if not -n <= i < n:
            raise IndexError("JobLines index out of range")
        return self._event(i % n)

    def __iter__(self) -> Iterator[Event]:
        return iter(self._all())

    @property
    def texts(self) -> Sequence[str]:
        """The lines' texts, as given: what a consumer folding the block at once reads."""
        return self._texts

    @property
    def offsets(self) -> Sequence[int]:
        return self._offsets

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def name(self) -> str:
        return self._name

    def with_texts(self, texts: Sequence[str], *, run_id: str | None = None,
                   name: str | None = None) -> JobLines:
        """The same block with other texts (its lines masked by the bus's redactor), and the
        run's id and name masked too where they hold a secret."""
        return JobLines(self._host, self._run_id if run_id is None else run_id,
                        self._name if name is None else name, texts, self._offsets, self._ts)

    def to_jsonl(self) -> str:
        """Every event's to_json() followed by a newline, concatenated (the recorder's path).

        What the lines share (ts, host, kind, run_id, name) is encoded once, from a real event
        so it cannot drift from to_json, and the texts in one encoder call: building a _Wire
        and encoding the payload dict per line cost ~20 % of a recording's throughput.
        tests/remote/spine/test_events.py checks it byte for byte against to_json on awkward text."""
        if not self._texts:
            return ""
        offsets = self._offsets
        if any(type(o) is not int for o in offsets):  # not the producers' shape: the generic path
            return to_jsonl(self._all())
        first = self[0]
        template = Event(JOB_LINE, first.host, {**first.payload, "text": "", "offset": 0},
                         first.ts).to_json()
        head = template[: -len(_TEMPLATE_END)]
        # JSON strings hold no raw newline, so the lines of encode_lines are the texts.
        texts = _ENCODER.encode_lines(self._texts).decode("utf-8").split("\n")
        return "".join([f'{head}{text},"offset":{offset}}}}}\n'
                        for text, offset in zip(texts, offsets, strict=False)])

    def to_records(self) -> str:
        """The block as session records, each followed by a newline: `job.lines` records
        (remote/event_types.JobLinesRecord) of at most RECORD_LINES lines and about
        RECORD_CHARS characters of text, so one record never holds more than a moment of log
        and a reader never holds a huge one. A one-line block, or one not in the producers'
        shape, is written as job.line lines (to_jsonl): nothing to share."""
        texts, offsets = self._texts, self._offsets
        if len(texts) < 2 or any(type(o) is not int for o in offsets) \
                or any(type(t) is not str for t in texts):
            return self.to_jsonl()
        ts, host, run_id, name = format_ts(self._ts), self._host, self._run_id, self._name
        return _ENCODER.encode_lines([
            _Wire(ts, host, JOB_LINES, {"run_id": run_id, "name": name, "texts": list(texts[a:b]),
                                        "offsets": list(offsets[a:b])})
            for a, b in _record_bounds(texts)]).decode("utf-8")


# A job.lines record holds at most this many lines and (roughly) characters of text: a block
# the tailer received at once is normally far below both (remote.jobs.client.BATCH_LINES).
RECORD_LINES = 512
RECORD_CHARS = 256 << 10


def _record_bounds(texts: Sequence[str]) -> list[tuple[int, int]]:
    n = len(texts)
    if n <= RECORD_LINES and sum(map(len, texts)) <= RECORD_CHARS:
        return [(0, n)]
    bounds = []
    start = size = 0
    for i, text in enumerate(texts):
        if i > start and (i - start >= RECORD_LINES or size + len(text) > RECORD_CHARS):
            bounds.append((start, i))
            start, size = i, 0
        size += len(text)
    bounds.append((start, n))
    return bounds


def expand_record(event: Event) -> Sequence[Event]:
    """The events a session record stands for: a job.lines record's job.line events, in
    order (as a JobLines, the batch the live tail published), any other record itself."""
    if event.kind != JOB_LINES:
        return (event,)
    data = typed(JOB_LINES, event.payload)
    if not isinstance(data, et.JobLinesRecord):
        raise RecordError("job.lines record: payload does not match its schema "
                          "(run_id, name, texts: list of strings, offsets: list of integers)")
    if not data.texts or len(data.texts) != len(data.offsets):
        raise RecordError(f"job.lines record: {len(data.texts)} texts but "
                          f"{len(data.offsets)} offsets")
    return JobLines(event.host, data.run_id, data.name, data.texts, data.offsets, event.ts)


_TEMPLATE_END = '"","offset":0}}'


def to_jsonl(events: Iterable[Event]) -> str:
    """Many events in one encoder call: what the recorder writes for a block of events."""
    return _ENCODER.encode_lines([_Wire(format_ts(e.ts), e.host, e.kind, e.payload)
                                  for e in events]).decode("utf-8")


def _json_default(obj: Any) -> Any:
    """Payloads come from probes and stages; tolerate the few non-JSON types they produce."""
    if hasattr(obj, "__fspath__"):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable in an event payload")


_ENCODER = msgspec.json.Encoder(enc_hook=_json_default)
_DECODER = msgspec.json.Decoder(_Wire)
