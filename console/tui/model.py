"""What the console knows about each host, folded from the event stream. No Textual here.

The TUI never asks the box anything directly: every screen renders this state, and this state
is only ever changed by `ConsoleState.apply(event)`. That is what makes a replay look exactly
like a live session, and what lets a seek rebuild the picture by folding the events before the
new position. Reducers mutate in place and report which domains changed, so the app refreshes
only the views that care (a job printing 10,000 lines/s must not redraw the GPU charts).
Payloads come from other machines: every field is read defensively, a malformed payload becomes
a note on the host, never an exception.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from console.tui.chart_data import ChartData
from console.tui.chart_data import fold as fold_charts
from console.tui.shown import shown_event
from console.tui.tail import LogTail
from pipeline.progress import PREFIX as RECORD_PREFIX
from remote.spine import event_types as et
from remote.spine import events as ev
from remote.spine.events import Event
from remote.spine.sanitize import visible

HISTORY = 120  # samples kept per GPU series (a sparkline's worth)
NOTES = 200  # console.info/warning/error messages kept per host
STAGE_ORDER = ("prepare", "extract", "vocab", "train", "evaluate")
BENCH_WATCH_KIND = "bench.watch"  # `console bench watch`: acceptance over one scrape window

# Domains a reducer can report as changed; views subscribe to the ones they render.
CONNECTION = "connection"
STATS = "stats"
JOBS = "jobs"
LOG = "log"
STAGES = "stages"
PROBES = "probes"
PATCH = "patch"
BENCH = "bench"
ALLREDUCE = "allreduce"
NOTES_DOMAIN = "notes"
MARKERS = "markers"


def _num(value: Any, default: float = 0.0) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _opt_num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass
class GpuState:
    index: int
    name: str = ""
    util: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    mem: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))  # percent of total
    power: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))  # watts
    last: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobState:
    run_id: str
    name: str = ""
    argv: list[str] = field(default_factory=list)
    pid: int | None = None
    log_path: str = ""
    state: str = "running"
    returncode: int | None = None
    tail: LogTail = field(default_factory=LogTail)
    # The same log without the stage's `@@eagle3 {json}` records (they are parsed into the
    # stage's columns); what the log pane shows unless the operator asks for the records.
    text: LogTail = field(default_factory=LogTail)

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass
class StageState:
    name: str
    status: str = "pending"  # pending | running | done | failed | skipped | not run
    done: float = 0.0
    total: float | None = None
    unit: str = ""
    rate: float | None = None
    seconds: float | None = None
    outputs: Any = None
    reason: str = ""
    run_id: str | None = None
    # What the stage's records carry beyond done/total (loss, epoch, head, acceptance...), the
    # latest value of each; and every run the stage's events named, oldest first.
    metrics: dict[str, Any] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    # From the stage's manifest on the box (stage.manifest, or a skip record that carries it):
    # the finished run's total output size, output count and completion time.
    bytes: int | None = None
    outputs_count: int | None = None
    completed: str = ""
    argv: list[str] = field(default_factory=list)  # the latest start's command on the box

    @property
    def fraction(self) -> float | None:
        if self.status == "done":
            return 1.0
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))


@dataclass
class PatchState:
    file: str
    recipes: list[dict[str, Any]] = field(default_factory=list)
    diff: str = ""
    status: str = "planned"  # planned | applied | verified | rolled_back | drift
    sha256: str = ""
    in_effect: list[str] = field(default_factory=list)  # recipe names applied/verified
    refused: str = ""  # why the patcher will not touch this file (unknown original, ...)
    drift: str = ""  # the container was recreated since the apply (remote/patcher/drift.py)


@dataclass
class ServerState:
    """One vLLM server (role speculative | baseline) as its serve.* events tell it."""

    role: str
    state: str = "starting"  # starting | ready | failed | stopped
    url: str = ""
    run_id: str = ""
    seconds: float | None = None  # launch to first answer
    error: str = ""
    log_tail: list[str] = field(default_factory=list)


@dataclass
class Note:
    ts: datetime
    level: str  # info | warning | error
    text: str


@dataclass
class HostState:
    name: str
    connection: str = "unknown"  # unknown | live | reconnecting | down
    attempt: int | None = None
    retry_delay: float | None = None
    connection_error: str = ""
    stats_source: str = ""
    stats_reason: str = ""
    cpu: float | None = None
    mem_used: float | None = None
    mem_total: float | None = None
    load: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    cpu_history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))  # percent
    mem_history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))  # percent of total
    gpus: dict[int, GpuState] = field(default_factory=dict)
    jobs: dict[str, JobState] = field(default_factory=dict)
    stages: dict[str, StageState] = field(default_factory=dict)
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)
    probe_errors: dict[str, str] = field(default_factory=dict)
    patches: dict[str, PatchState] = field(default_factory=dict)
    bench_points: list[dict[str, Any]] = field(default_factory=list)
    bench_summary: dict[str, Any] = field(default_factory=dict)
    allreduce: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    bench_watch: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    notes: deque[Note] = field(default_factory=lambda: deque(maxlen=NOTES))
    servers: dict[str, ServerState] = field(default_factory=dict)  # role -> its server
    # The box runner this console follows (pipeline.run): run_id, how (started, attached,
    # reattached, or found: the last one, ended before this console connected), config,
    # started, state.
    pipeline_run: dict[str, str] = field(default_factory=dict)
    charts: ChartData = field(default_factory=ChartData)  # series only the charts draw
    last_event: datetime | None = None

    def ordered_stages(self) -> list[StageState]:
        known = [self.stages[n] for n in STAGE_ORDER if n in self.stages]
        return known + [s for n, s in self.stages.items() if n not in STAGE_ORDER]

    def running_jobs(self) -> list[JobState]:
        return [j for j in self.jobs.values() if j.running]

    def jobs_without_stage(self) -> list[JobState]:
        """Runs no stage event claims (reattached on connect, or launched by other tools)."""
        claimed = {s.run_id for s in self.stages.values() if s.run_id}
        claimed.update(r for s in self.stages.values() for r in s.runs)
        names = set(self.stages) | {f"pipeline-{n}" for n in self.stages}
        return [j for j in self.jobs.values() if j.run_id not in claimed and j.name not in names]

    def job_for_stage(self, stage: str) -> JobState | None:
        """The run whose log a stage's tail shows: by run_id when the stage said, else the latest
        job with the stage's name. `job:<run_id>` names a run directly."""
        if stage.startswith("job:"):
            return self.jobs.get(stage[4:])
        st = self.stages.get(stage)
        if st is not None and st.run_id and st.run_id in self.jobs:
            return self.jobs[st.run_id]
        for job in reversed(list(self.jobs.values())):
            if job.name in (stage, f"pipeline-{stage}"):
                return job
        return None

    def stage_runs(self, stage: str) -> list[JobState]:
        """The runs of one stage, oldest first: those its events named, and those launched
        under its name (`pipeline-<stage>`: one job per stage, before the box runner)."""
        st = self.stages.get(stage)
        named = set(st.runs) if st is not None else set()
        if st is not None and st.run_id:
            named.add(st.run_id)
        return [j for j in self.jobs.values()
                if j.run_id in named or j.name in (stage, f"pipeline-{stage}")]

    def stage_of_run(self, run_id: str) -> str | None:
        job = self.jobs.get(run_id)
        for name, st in self.stages.items():
            if run_id == st.run_id or run_id in st.runs:
                return name
            if job is not None and job.name in (name, f"pipeline-{name}"):
                return name
        return None

    def compat_findings(self) -> list[dict[str, Any]]:
        result = self.probes.get("compat") or {}
        findings = result.get("findings") if isinstance(result, dict) else None
        return [f for f in findings if isinstance(f, dict)] if isinstance(findings, list) else []


Reducer = Callable[[HostState, Event], set[str]]


class ConsoleState:
    """All hosts' state plus the session-wide bits (markers, replay position)."""

    def __init__(self, hosts: Iterable[str] = ()) -> None:
        self.hosts: dict[str, HostState] = {}
        self.markers: list[tuple[datetime, str, str]] = []  # (ts, host, label)
        self.notes: deque[Note] = deque(maxlen=NOTES)  # messages not about one host
        self.events_seen = 0
        self.last_ts: datetime | None = None
        for name in hosts:
            self.host(name)

    def host(self, name: str) -> HostState:
        if name not in self.hosts:
            self.hosts[name] = HostState(name)
        return self.hosts[name]

    def apply(self, event: Event) -> set[str]:
        """Fold one event in; returns the domains that changed."""
        self.events_seen += 1
        self.last_ts = event.ts
        if event.kind != ev.JOB_LINE:  # job lines: the log views sanitise what they draw
            event = shown_event(event)
        if event.kind == ev.MARKER:
            label = str(event.payload.get("label") or event.payload.get("summary") or "marker")
            self.markers.append((event.ts, event.host, label))
            return {MARKERS}
        reducer = REDUCERS.get(event.kind)
        if reducer is None:
            return set()
        if not event.host and reducer is _note:
            self.notes.append(Note(event.ts, event.kind.rsplit(".", 1)[-1],
                                   str(event.payload.get("message") or event.payload.get("summary") or "")))
            return {NOTES_DOMAIN}
        host = self.host(event.host or "local")
        host.last_event = event.ts
        try:
            return reducer(host, event)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            host.notes.append(Note(event.ts, "error", f"malformed {event.kind} payload: {exc}"))
            return {NOTES_DOMAIN}

    def apply_all(self, events: Iterable[Event]) -> set[str]:
        changed: set[str] = set()
        for e in events:
            changed |= self.apply(e)
        return changed

    def apply_batch(self, events: Sequence[Event]) -> set[str]:
        """Events published together (a session record's): a log block (JobLines) folded in
        one go, its job looked up once and its lines appended to the tails (apply() per line
        was ~15 us, most of a replay's background fold); anything else event by event. The
        same state either way (tests/console/tui/test_replay_checkpoints.py compares them)."""
        if not isinstance(events, ev.JobLines) or not events:
            return self.apply_all(events)
        first, last = events[0], events[-1]
        self.events_seen += len(events)
        self.last_ts = last.ts
        host = self.host(first.host or "local")
        host.last_event = last.ts
        p = first.payload
        run_id = visible(str(p.get("run_id") or p.get("name") or "?"))
        job = host.jobs.get(run_id)
        if job is None:
            job = JobState(run_id=run_id, name=visible(str(p.get("name") or run_id)))
            host.jobs[run_id] = job
        append, text_append = job.tail.append, job.text.append
        for text, offset in zip(events.texts, events.offsets, strict=True):
            append(text, offset)
            if not text.startswith(RECORD_PREFIX):
                text_append(text)
        return {LOG}


# -- reducers -------------------------------------------------------------------------------------

def _connection(host: HostState, e: Event) -> set[str]:
    data = e.data()
    if isinstance(data, et.ConnectionUp):
        host.connection, host.attempt, host.retry_delay, host.connection_error = "live", None, None, ""
    elif isinstance(data, et.ConnectionRetry):
        host.connection = "reconnecting"
        host.attempt = data.attempt or None
        host.retry_delay = float(data.delay)
        host.connection_error = data.error or host.connection_error
    elif isinstance(data, et.ConnectionDown):
        host.connection = "down"
        host.connection_error = data.error
    else:
        return _malformed(host, e)
    return {CONNECTION}


def _stats(host: HostState, e: Event) -> set[str]:
    p = e.payload
    host.stats_source = str(p.get("source") or "")
    # The reason is sent once when it changes (remote/stats/stream.py); NVML needs none.
    if "reason" in p:
        host.stats_reason = str(p.get("reason") or "")
    elif p.get("source") == "nvml":
        host.stats_reason = ""
    h = p.get("host") or {}
    if isinstance(h, dict):
        host.cpu = _opt_num(h.get("cpu"))
        host.mem_used = _opt_num(h.get("mem_used"))
        host.mem_total = _opt_num(h.get("mem_total"))
        load = _opt_num(h.get("load1"))
        if load is not None:
            host.load.append(load)
    for g in p.get("gpus") or []:
        if not isinstance(g, dict):
            continue
        index = int(_num(g.get("index"), len(host.gpus)))
        gpu = host.gpus.get(index) or GpuState(index)
        host.gpus[index] = gpu
        gpu.name = str(g.get("name") or gpu.name)
        gpu.util.append(_num(g.get("util")))
        total = _num(g.get("mem_total"))
        gpu.mem.append(100.0 * _num(g.get("mem_used")) / total if total > 0 else 0.0)
        gpu.power.append(_num(g.get("power")))
        gpu.last = dict(g)
    return {STATS}


def _job(host: HostState, e: Event) -> set[str]:
    p = e.payload
    run_id = visible(str(p.get("run_id") or p.get("name") or "?"))  # job.line is not sanitised
    job = host.jobs.get(run_id)
    if job is None:
        job = JobState(run_id=run_id, name=visible(str(p.get("name") or run_id)))
        host.jobs[run_id] = job
    if e.kind == ev.JOB_LINE:
        offset = p.get("offset")
        text = str(p.get("text", ""))
        job.tail.append(text, int(offset) if isinstance(offset, int) else None)
        if not text.startswith(RECORD_PREFIX):
            job.text.append(text)
        return {LOG}
    if e.kind == ev.JOB_STARTED:
        argv = p.get("argv")
        job.argv = [str(a) for a in argv] if isinstance(argv, list) else []
        job.pid = int(p["pid"]) if isinstance(p.get("pid"), int) else None
        job.log_path = str(p.get("log") or "")
        job.state = "running"
    else:
        job.state = str(p.get("state") or "exited")
        rc = p.get("returncode")
        job.returncode = int(rc) if isinstance(rc, int) else None
    return {JOBS}


def _stage(host: HostState, e: Event) -> set[str]:
    data = e.data()
    if not isinstance(data, (et.StageStart, et.StageProgress, et.StageEnd, et.StageSkipped)):
        return _malformed(host, e)
    st = host.stages.get(data.stage)
    if st is None:
        st = StageState(data.stage)
        host.stages[data.stage] = st
    if isinstance(data, et.StageStart):
        st.status, st.done, st.total, st.rate, st.seconds, st.reason = "running", 0.0, None, None, None, ""
        st.bytes = st.outputs_count = None
        st.completed = ""
        if data.run_id:
            st.run_id = data.run_id
    elif isinstance(data, et.StageProgress):
        st.status = "running" if st.status == "pending" else st.status
        st.done = float(data.done or 0)
        st.total = None if data.total is None else float(data.total)
        st.unit = data.unit or st.unit
        st.rate = None if data.rate is None else float(data.rate)
    elif isinstance(data, et.StageEnd):
        st.status = "done" if data.ok else "failed"
        st.seconds = None if data.seconds is None else float(data.seconds)
        st.outputs = data.outputs
        if st.status == "done" and st.total:
            st.done = st.total
    else:
        st.status, st.reason = "skipped", data.reason
        _manifest_facts(st, data)
    return {STAGES}


def _manifest_facts(st: StageState, data: et.StageSkipped | et.StageManifest) -> None:
    if data.seconds is not None:
        st.seconds = float(data.seconds)
    if data.bytes is not None:
        st.bytes, st.outputs_count = data.bytes, data.outputs
    if data.completed:
        st.completed = data.completed


def _stage_box(host: HostState, e: Event) -> set[str]:
    """What the box says of a stage outside its own records: not reached by the runner
    (stage.not_run) or as its manifest stands (stage.manifest). A manifest never overrides a
    stage running now, nor a failure or a not-run this console saw (no manifest is all a
    failed stage leaves); a complete one is done, with its time and size."""
    data = e.data()
    if not isinstance(data, (et.StageNotRun, et.StageManifest)):
        return _malformed(host, e)
    st = host.stages.get(data.stage)
    if st is None:
        st = host.stages[data.stage] = StageState(data.stage)
    if isinstance(data, et.StageNotRun):
        st.status, st.reason = "not run", data.reason
        return {STAGES}
    if st.status == "running":
        return set()
    if data.complete:
        st.status, st.reason = "done", ""
        _manifest_facts(st, data)
    elif st.status not in ("failed", "not run"):
        st.status, st.reason = "pending", data.reason
        st.seconds = st.bytes = st.outputs_count = None
        st.completed = ""
    return {STAGES}


def _pipeline_run(host: HostState, e: Event) -> set[str]:
    data = e.data()
    if not isinstance(data, et.PipelineRun):
        return _malformed(host, e)
    host.pipeline_run = {"run_id": data.run_id, "how": data.how, "config": data.config,
                         "started": data.started, "state": data.state}
    return {STAGES}


def _malformed(host: HostState, e: Event) -> set[str]:
    """A payload its kind's schema does not accept (a damaged or pre-schema session): said once
    as a note, the state left as it was."""
    host.notes.append(Note(e.ts, "error", f"malformed {e.kind} payload (not its schema); skipped"))
    return {NOTES_DOMAIN}


def _probe(host: HostState, e: Event) -> set[str]:
    p = e.payload
    probe = str(p.get("probe") or "?")
    if e.kind == ev.PROBE_RESULT:
        result = p.get("result")
        host.probes[probe] = result if isinstance(result, dict) else {"value": result}
        host.probe_errors.pop(probe, None)
    else:
        host.probe_errors[probe] = str(p.get("message") or p.get("summary") or "probe failed")
    return {PROBES}


_PATCH_STATUS = {
    ev.PATCH_PLANNED: "planned",
    ev.PATCH_APPLIED: "applied",
    ev.PATCH_VERIFIED: "verified",
    ev.PATCH_ROLLED_BACK: "rolled_back",
}


def _patch(host: HostState, e: Event) -> set[str]:
    data = e.data()
    if not isinstance(data, (et.PatchPlanned, et.PatchApplied, et.PatchVerified,
                             et.PatchRolledBack)):
        return set()  # a damaged or pre-schema record: nothing reliable to show
    ps = host.patches.get(data.file) or PatchState(data.file)
    host.patches[data.file] = ps
    ps.status = _PATCH_STATUS[e.kind]
    if isinstance(data, et.PatchPlanned):
        ps.recipes = [{"name": r.name, "applies": r.applies, "reason": r.reason}
                      for r in data.recipes]
        ps.diff = data.diff
        ps.in_effect = []
        ps.refused = data.refused or ""
    else:
        ps.in_effect = [r.name for r in data.recipes if r.in_effect]
        known = {str(r.get("name")) for r in ps.recipes}
        ps.recipes += [{"name": r.name} for r in data.recipes if r.name not in known]
    if data.sha256:
        ps.sha256 = data.sha256
    ps.drift = (data.drift or "") if isinstance(data, et.PatchVerified) else ""
    if ps.drift:
        ps.status = "drift"
    return {PATCH}


def _bench(host: HostState, e: Event) -> set[str]:
    if e.kind == ev.BENCH_POINT:
        host.bench_points.append(dict(e.payload))
    else:
        host.bench_summary = dict(e.payload)
    return {BENCH}


def _bench_watch(host: HostState, e: Event) -> set[str]:
    host.bench_watch.append(dict(e.payload))
    return {BENCH}


def _serve(host: HostState, e: Event) -> set[str]:
    data = e.data()
    if not isinstance(data, (et.ServeStarting, et.ServeReady, et.ServeFailed, et.ServeStopped)):
        return _malformed(host, e)
    role = data.role or next((r for r, s in host.servers.items() if s.run_id == data.run_id), "")
    if not role:
        return set()  # a stop of a server this session never saw start
    srv = host.servers.get(role)
    if srv is None or isinstance(data, et.ServeStarting):
        srv = ServerState(role)
        host.servers[role] = srv
    srv.run_id = data.run_id or srv.run_id
    if isinstance(data, (et.ServeStarting, et.ServeReady)):
        srv.url = data.url
        srv.state = "starting" if isinstance(data, et.ServeStarting) else "ready"
        if isinstance(data, et.ServeReady):
            srv.seconds = float(data.seconds)
    elif isinstance(data, et.ServeFailed):
        srv.state, srv.error, srv.log_tail = "failed", data.error, list(data.log_tail)
    else:
        srv.state = "stopped"
    return {BENCH}


def _allreduce(host: HostState, e: Event) -> set[str]:
    mode = str(e.payload.get("mode") or "sweep")
    rows = e.payload.get("rows")
    host.allreduce[mode] = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    return {ALLREDUCE}


def _note(host: HostState, e: Event) -> set[str]:
    level = e.kind.rsplit(".", 1)[-1]
    text = str(e.payload.get("message") or e.payload.get("summary") or "")
    host.notes.append(Note(e.ts, level, text))
    return {NOTES_DOMAIN}


REDUCERS: dict[str, Reducer] = {
    ev.CONNECTION_UP: _connection,
    ev.CONNECTION_DOWN: _connection,
    ev.CONNECTION_RETRY: _connection,
    ev.STATS_SAMPLE: _stats,
    ev.JOB_STARTED: _job,
    ev.JOB_LINE: _job,
    ev.JOB_EXIT: _job,
    ev.STAGE_START: _stage,
    ev.STAGE_PROGRESS: _stage,
    ev.STAGE_END: _stage,
    ev.STAGE_SKIPPED: _stage,
    ev.STAGE_NOT_RUN: _stage_box,
    ev.STAGE_MANIFEST: _stage_box,
    ev.PIPELINE_RUN: _pipeline_run,
    ev.PROBE_RESULT: _probe,
    ev.PROBE_ERROR: _probe,
    ev.PATCH_PLANNED: _patch,
    ev.PATCH_APPLIED: _patch,
    ev.PATCH_VERIFIED: _patch,
    ev.PATCH_ROLLED_BACK: _patch,
    ev.BENCH_POINT: _bench,
    ev.BENCH_SUMMARY: _bench,
    BENCH_WATCH_KIND: _bench_watch,
    ev.ALLREDUCE_RESULT: _allreduce,
    ev.SERVE_STARTING: _serve,
    ev.SERVE_READY: _serve,
    ev.SERVE_FAILED: _serve,
    ev.SERVE_STOPPED: _serve,
    ev.CONSOLE_INFO: _note,
    ev.CONSOLE_WARNING: _note,
    ev.CONSOLE_ERROR: _note,
}


# -- what the stage records carry beyond progress ------------------------------------------------
# Kept apart from `_stage` (which folds status and progress): loss, epoch, the evaluated head's
# acceptance and the runs a stage's events name, for the Pipeline screen's columns and the Bench
# screen's offline acceptance.
METRIC_KEYS = ("loss", "epoch", "head", "tokens", "acc_0")
RESULT_KEYS = ("mean_length", "rate", "per_position", "untrained_mean_length")


def _stage_metrics(host: HostState, e: Event) -> None:
    p = e.payload
    st = host.stages.get(str(p.get("stage") or "?"))
    if st is None:
        return
    run_id = p.get("run_id")
    if isinstance(run_id, str) and run_id and run_id not in st.runs:
        st.runs.append(run_id)
    if e.kind == ev.STAGE_START:
        st.metrics = {}
        argv = p.get("argv")
        st.argv = [str(a) for a in argv] if isinstance(argv, list) else []
    elif e.kind == ev.STAGE_PROGRESS:
        for k in METRIC_KEYS:
            v = p.get(k)
            if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                st.metrics[k] = v
    elif e.kind == ev.STAGE_END:
        result = p.get("result")
        if isinstance(result, dict):
            for k in RESULT_KEYS:
                if k in result:
                    st.metrics[k] = result[k]


def _with_metrics(reducer: Reducer) -> Reducer:
    def fold(host: HostState, e: Event) -> set[str]:
        changed = reducer(host, e)
        if STAGES in changed:
            _stage_metrics(host, e)
        return changed

    return fold


for _kind in (ev.STAGE_START, ev.STAGE_PROGRESS, ev.STAGE_END, ev.STAGE_SKIPPED):
    REDUCERS[_kind] = _with_metrics(REDUCERS[_kind])



def _with_host_history(reducer: Reducer) -> Reducer:
    """CPU and memory history next to load: the Stats screen of a host without GPUs."""
    def fold(host: HostState, e: Event) -> set[str]:
        changed = reducer(host, e)
        if STATS in changed:
            if host.cpu is not None:
                host.cpu_history.append(host.cpu)
            if host.mem_used is not None and host.mem_total:
                host.mem_history.append(100.0 * host.mem_used / host.mem_total)
        return changed

    return fold


REDUCERS[ev.STATS_SAMPLE] = _with_host_history(REDUCERS[ev.STATS_SAMPLE])


def _with_charts(reducer: Reducer) -> Reducer:
    """The series the charts draw beyond the state (console/tui/chart_data.py), folded from the
    same events, after the reducer accepted them."""
    def fold(host: HostState, e: Event) -> set[str]:
        changed = reducer(host, e)
        if changed and NOTES_DOMAIN not in changed:
            fold_charts(host.charts, e)
        return changed

    return fold


for _kind in (ev.STATS_SAMPLE, ev.STAGE_START, ev.STAGE_PROGRESS, BENCH_WATCH_KIND):
    REDUCERS[_kind] = _with_charts(REDUCERS[_kind])
