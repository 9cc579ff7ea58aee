"""One schema per event kind: what a producer must send and what a consumer may rely on.

The wire form of an event stays a JSON object (a session file from before these schemas still
replays), but every producer goes through a schema: `bus.emit(kind, host, **fields)` validates
the fields against the kind's schema (a wrong type or a missing required field is a bug in the
producer and raises at once), and new code builds the struct itself (`Event.of(JobExit(...))`).
Test doubles emit through the same path, so a double cannot drift from the real producer.

Consumers read `event.data()`: the typed payload, or None for a payload that does not match
(an old or damaged session file), which a reducer simply skips. Unknown kinds have no schema
and stay plain dicts; unknown fields are ignored by the typed view and kept in the payload.

Schemas are msgspec Structs: building one costs about as much as a tuple, and converting a
payload dict costs about a microsecond, which is why this is affordable on every emit.

Fields that are the same for every event of a stream (a stats sampler's fallback reason, the
one-line text a printer shows) are not part of the schema: the printer derives its text from
the fields (`summarize`), and the stats reason is sent once when it changes.

The kinds are data: one table (SCHEMAS, at the end) names each kind and its schema, and sets
the schema's KIND from it. The schemas of what the operations report (patches, stats, bench,
serve) are in remote/spine/op_types.py, their base in remote/spine/payload.py.
"""

from __future__ import annotations

from typing import Any

from remote.spine.op_types import (  # their kinds are in the table below
    AllreduceResult,
    BenchPoint,
    BenchSummary,
    BenchWatch,
    PatchApplied,
    PatchPlanned,
    PatchRolledBack,
    PatchVerified,
    ServeFailed,
    ServeReady,
    ServeStarting,
    ServeStopped,
    SessionRedactions,
    StatsAlert,
    StatsSample,
)
from remote.spine.payload import Num, Payload

# -- connection ---------------------------------------------------------------------------------


class ConnectionUp(Payload, kw_only=True, frozen=True):
    attempt: int = 0


class ConnectionDown(Payload, kw_only=True, frozen=True):
    error: str = ""
    # Set when the box was reached again but the console refused to go on ("host key",
    # "auth", "config"): the session ends on why, not on "reconnecting" (issue 41).
    refused: str = ""


class ConnectionRetry(Payload, kw_only=True, frozen=True):
    attempt: int
    delay: Num
    error: str = ""


# -- console notes ------------------------------------------------------------------------------


class _Note(Payload, kw_only=True, frozen=True):
    message: str
    stage: str | None = None
    error: str | None = None
    source: str | None = None
    reason: str | None = None
    delay: Num | None = None
    attempt: int | None = None
    files: list[str] | None = None


class ConsoleInfo(_Note, kw_only=True, frozen=True):
    pass


class ConsoleWarning(_Note, kw_only=True, frozen=True):
    pass


class ConsoleErrorNote(_Note, kw_only=True, frozen=True):
    pass


class Marker(Payload, kw_only=True, frozen=True):
    label: str = ""


# -- probes -------------------------------------------------------------------------------------


class ProbeResult(Payload, kw_only=True, frozen=True):
    probe: str
    result: Any = None


class ProbeError(Payload, kw_only=True, frozen=True):
    probe: str
    message: str


# -- jobs ---------------------------------------------------------------------------------------


class JobStarted(Payload, kw_only=True, frozen=True):
    run_id: str
    name: str
    argv: list[str] = []
    pid: int | None = None
    log: str = ""


class JobLine(Payload, kw_only=True, frozen=True):
    """One line of a job's log; offset is the byte offset just after it (the resume point)."""

    run_id: str = ""
    name: str = ""
    text: str
    offset: int = 0


class JobLinesRecord(Payload, kw_only=True, frozen=True):
    """A block of one job's log as ONE session record (never an event on the bus): the lines
    a tail received together share ts, host, run_id and name, so a session stores them once
    and the texts and offsets as arrays. A per-line record made every reader build Python
    objects per log line (~0.5 us each: half of `replay --print`'s budget at 1 M lines/s).
    Readers expand it into the same job.line events (`remote.spine.events.expand_record`);
    texts[i] ends at byte offsets[i] of the log."""

    run_id: str = ""
    name: str = ""
    texts: list[str]
    offsets: list[int]


class JobExit(Payload, kw_only=True, frozen=True):
    run_id: str
    name: str = ""
    state: str = "exited"
    returncode: int | None = None


class JobStatus(Payload, kw_only=True, frozen=True):
    """A run record (`console jobs --json`): remote.jobs.client.RunInfo's fields."""

    run_id: str
    name: str = ""
    state: str = ""
    returncode: int | None = None
    pid: int | None = None


# -- pipeline stages ----------------------------------------------------------------------------


class StageStart(Payload, kw_only=True, frozen=True):
    stage: str
    run_id: str | None = None
    reason: str | None = None
    argv: list[str] | None = None  # the stage's command on the box (sessions before: none)


class StageProgress(Payload, kw_only=True, frozen=True):
    """done/total in `unit`; a stage may add its own numbers (loss, lr), kept in the payload."""

    stage: str
    done: Num | None = None
    total: Num | None = None
    unit: str = ""
    rate: Num | None = None  # only once it means something (pipeline/progress.py)
    elapsed: Num | None = None  # seconds since the stage's progress began (older records: none)


class StageEnd(Payload, kw_only=True, frozen=True):
    stage: str
    ok: bool = True
    seconds: Num | None = None
    run_id: str | None = None
    outputs: Any = None
    result: Any = None
    error: str | None = None


class StageSkipped(Payload, kw_only=True, frozen=True):
    """A stage whose manifest matches; the manifest's facts when the box sent them."""

    stage: str
    reason: str = ""
    seconds: Num | None = None
    bytes: int | None = None
    outputs: int | None = None
    completed: str | None = None


class StageNotRun(Payload, kw_only=True, frozen=True):
    """A stage the box runner did not reach: an earlier stage failed, or the run was cancelled
    or lost (reason says which)."""

    stage: str
    reason: str = ""
    run_id: str | None = None


class StageManifest(Payload, kw_only=True, frozen=True):
    """What a stage's manifest on the box says now (`python -m pipeline plan`): complete or
    why not, and for a finished stage its time, size and completion time. How a console that
    did not watch a run shows it."""

    stage: str
    complete: bool = False
    reason: str = ""
    seconds: Num | None = None
    bytes: int | None = None
    outputs: int | None = None
    completed: str | None = None
    config: str = ""


class PipelineRun(Payload, kw_only=True, frozen=True):
    """The box runner this console follows: `how` is started (launched now), attached (a
    start found one running: the job lock), reattached (running when the console connected) or
    found (the last one, already ended when the console connected)."""

    run_id: str
    how: str = "started"
    state: str = "running"
    config: str = ""
    started: str = ""


class UploadProgress(Payload, kw_only=True, frozen=True):
    path: str
    done: int
    total: int


# The one table of kinds: a kind's name and its schema, read both ways (a schema's KIND is set
# from here, so `Event.of(payload)` knows the kind of a typed payload).
SCHEMAS: dict[str, type[Payload]] = {
    "connection.up": ConnectionUp,
    "connection.down": ConnectionDown,
    "connection.retry": ConnectionRetry,
    "console.info": ConsoleInfo,
    "console.warning": ConsoleWarning,
    "console.error": ConsoleErrorNote,
    "marker": Marker,
    "probe.result": ProbeResult,
    "probe.error": ProbeError,
    "job.started": JobStarted,
    "job.line": JobLine,
    "job.lines": JobLinesRecord,
    "job.exit": JobExit,
    "job.status": JobStatus,
    "stage.start": StageStart,
    "stage.progress": StageProgress,
    "stage.end": StageEnd,
    "stage.skipped": StageSkipped,
    "stage.not_run": StageNotRun,
    "stage.manifest": StageManifest,
    "pipeline.run": PipelineRun,
    "upload.progress": UploadProgress,
    "patch.planned": PatchPlanned,
    "patch.applied": PatchApplied,
    "patch.verified": PatchVerified,
    "patch.rolled_back": PatchRolledBack,
    "stats.sample": StatsSample,
    "stats.alert": StatsAlert,
    "allreduce.result": AllreduceResult,
    "bench.point": BenchPoint,
    "bench.summary": BenchSummary,
    "bench.watch": BenchWatch,
    "serve.starting": ServeStarting,
    "serve.ready": ServeReady,
    "serve.failed": ServeFailed,
    "serve.stopped": ServeStopped,
    "session.redactions": SessionRedactions,
}
for _kind, _schema in SCHEMAS.items():
    _schema.KIND = _kind


