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
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

Num = int | float


class Payload(msgspec.Struct, kw_only=True, frozen=True):
    """Base of every schema. `summary` is optional everywhere: a producer may say in words what
    happened; when it does not, the printer derives a line from the fields."""

    KIND: ClassVar[str] = ""
    summary: str | None = None


# -- connection ---------------------------------------------------------------------------------


class ConnectionUp(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "connection.up"
    attempt: int = 0


class ConnectionDown(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "connection.down"
    error: str = ""


class ConnectionRetry(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "connection.retry"
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
    KIND: ClassVar[str] = "console.info"


class ConsoleWarning(_Note, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "console.warning"


class ConsoleError(_Note, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "console.error"


class Marker(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "marker"
    label: str = ""


# -- probes -------------------------------------------------------------------------------------


class ProbeResult(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "probe.result"
    probe: str
    result: Any = None


class ProbeError(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "probe.error"
    probe: str
    message: str


# -- jobs ---------------------------------------------------------------------------------------


class JobStarted(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "job.started"
    run_id: str
    name: str
    argv: list[str] = []
    pid: int | None = None
    log: str = ""


class JobLine(Payload, kw_only=True, frozen=True):
    """One line of a job's log; offset is the byte offset just after it (the resume point)."""

    KIND: ClassVar[str] = "job.line"
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

    KIND: ClassVar[str] = "job.lines"
    run_id: str = ""
    name: str = ""
    texts: list[str]
    offsets: list[int]


class JobExit(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "job.exit"
    run_id: str
    name: str = ""
    state: str = "exited"
    returncode: int | None = None


class JobStatus(Payload, kw_only=True, frozen=True):
    """A run record (`console jobs --json`): remote.jobs.client.RunInfo's fields."""

    KIND: ClassVar[str] = "job.status"
    run_id: str
    name: str = ""
    state: str = ""
    returncode: int | None = None
    pid: int | None = None


# -- pipeline stages ----------------------------------------------------------------------------


class StageStart(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "stage.start"
    stage: str
    run_id: str | None = None
    reason: str | None = None
    argv: list[str] | None = None  # the stage's command on the box (sessions before: none)


class StageProgress(Payload, kw_only=True, frozen=True):
    """done/total in `unit`; a stage may add its own numbers (loss, lr), kept in the payload."""

    KIND: ClassVar[str] = "stage.progress"
    stage: str
    done: Num | None = None
    total: Num | None = None
    unit: str = ""
    rate: Num | None = None


class StageEnd(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "stage.end"
    stage: str
    ok: bool = True
    seconds: Num | None = None
    run_id: str | None = None
    outputs: Any = None
    result: Any = None
    error: str | None = None


class StageSkipped(Payload, kw_only=True, frozen=True):
    """A stage whose manifest matches; the manifest's facts when the box sent them."""

    KIND: ClassVar[str] = "stage.skipped"
    stage: str
    reason: str = ""
    seconds: Num | None = None
    bytes: int | None = None
    outputs: int | None = None
    completed: str | None = None


class StageNotRun(Payload, kw_only=True, frozen=True):
    """A stage the box runner did not reach: an earlier stage failed, or the run was cancelled
    or lost (reason says which)."""

    KIND: ClassVar[str] = "stage.not_run"
    stage: str
    reason: str = ""
    run_id: str | None = None


class StageManifest(Payload, kw_only=True, frozen=True):
    """What a stage's manifest on the box says now (`python -m pipeline plan`): complete or
    why not, and for a finished stage its time, size and completion time. How a console that
    did not watch a run shows it."""

    KIND: ClassVar[str] = "stage.manifest"
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

    KIND: ClassVar[str] = "pipeline.run"
    run_id: str
    how: str = "started"
    state: str = "running"
    config: str = ""
    started: str = ""


class UploadProgress(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "upload.progress"
    path: str
    done: int
    total: int


# -- patches ------------------------------------------------------------------------------------


class RecipeDecision(msgspec.Struct, kw_only=True, frozen=True):
    name: str
    applies: bool = False
    reason: str = ""
    in_effect: bool = False


class PatchPlanned(Payload, kw_only=True, frozen=True):
    """The plan for one file. recipes: the decision per recipe (remote.patcher.plan)."""

    KIND: ClassVar[str] = "patch.planned"
    file: str
    rel: str = ""
    version: str | None = None
    recipes: list[RecipeDecision] = []
    diff: str = ""
    sha256: str | None = None
    original_sha256: str | None = None
    original_known: bool = False
    refused: str | None = None
    forceable: bool = False
    notes: list[str] = []


class RecipeState(msgspec.Struct, kw_only=True, frozen=True):
    name: str
    in_effect: bool


class _PatchState(Payload, kw_only=True, frozen=True):
    """The state of a file after an action: every recipe of the file, and whether it is in
    effect now."""

    file: str
    rel: str = ""
    recipes: list[RecipeState] = []
    sha256: str = ""
    state: str | None = None
    changed: bool | None = None
    backup: str | None = None
    backup_sha256: str | None = None


class PatchApplied(_PatchState, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "patch.applied"


class PatchVerified(_PatchState, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "patch.verified"


class PatchRolledBack(_PatchState, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "patch.rolled_back"


# -- stats --------------------------------------------------------------------------------------


class HostSample(msgspec.Struct, kw_only=True, frozen=True):
    cpu: Num | None = None
    mem_used: Num | None = None
    mem_total: Num | None = None
    load1: Num | None = None


class GpuProc(msgspec.Struct, kw_only=True, frozen=True):
    pid: int
    name: str = ""
    mem_used: int | None = None


class GpuSample(msgspec.Struct, kw_only=True, frozen=True):
    index: int
    name: str = ""
    util: Num | None = None
    mem_used: Num | None = None
    mem_total: Num | None = None
    power: Num | None = None
    power_limit: Num | None = None
    temp: Num | None = None
    sm_clock: Num | None = None
    pcie_tx: Num | None = None
    pcie_rx: Num | None = None
    procs: list[GpuProc] = []


class StatsSample(Payload, kw_only=True, frozen=True):
    """One sample of a host and its GPUs. `reason` (why the source is not NVML) is only in the
    first sample after it changed: a long session must not repeat it per sample."""

    KIND: ClassVar[str] = "stats.sample"
    source: str = "none"
    host: HostSample
    gpus: list[GpuSample] = []
    reason: str | None = None
    seq: Num | None = None
    t: Num | None = None
    self_cpu: Num | None = None
    interval: Num | None = None


# -- allreduce, bench ---------------------------------------------------------------------------


class AllreduceResult(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "allreduce.result"
    mode: str = ""


class BenchPoint(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "bench.point"
    label: str = ""
    concurrency: int | None = None


class BenchSummary(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "bench.summary"
    label: str = ""
    result_file: str | None = None


class BenchWatch(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "bench.watch"
    window: int | None = None
    seconds: Num | None = None


# -- serve (remote/serving/serve.py) ---------------------------------------------------------------------


class ServeStarting(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "serve.starting"
    role: str
    url: str
    run_id: str


class ServeReady(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "serve.ready"
    role: str
    url: str
    run_id: str
    seconds: Num


class ServeFailed(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "serve.failed"
    role: str
    run_id: str
    error: str
    log_tail: list[str] = []


class ServeStopped(Payload, kw_only=True, frozen=True):
    KIND: ClassVar[str] = "serve.stopped"
    role: str = ""
    run_id: str
    state: str


SCHEMAS: dict[str, type[Payload]] = {
    cls.KIND: cls
    for cls in (
        ConnectionUp, ConnectionDown, ConnectionRetry, ConsoleInfo, ConsoleWarning, ConsoleError,
        Marker, ProbeResult, ProbeError, JobStarted, JobLine, JobLinesRecord, JobExit,
        JobStatus, StageStart, StageProgress, StageEnd, StageSkipped, StageNotRun, StageManifest,
        PipelineRun, UploadProgress,
        PatchPlanned, PatchApplied, PatchVerified, PatchRolledBack, StatsSample,
        AllreduceResult, BenchPoint, BenchSummary, BenchWatch, ServeStarting, ServeReady,
        ServeFailed, ServeStopped,
    )
}


class PayloadError(TypeError):
    """A producer sent fields its kind's schema does not accept: a bug in the producer."""
