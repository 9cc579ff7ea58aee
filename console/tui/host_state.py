"""What the console knows about one host: the state every screen renders. No Textual here.

The dataclasses the reducers (console/tui/reducers.py, remote/spine/stage_life.py) fill and
the widgets read, and the names of the domains a reducer reports as changed, so a view
subscribes only to what it draws. Apart from the reducers because a screen reads this and never
folds; console/tui/model.py (ConsoleState) holds one HostState per host.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from console.tui.chart_data import ChartData
from console.tui.tail import LogTail
from pipeline.stages import names as stage_order  # the stages' order: pipeline/stages' table
from remote.spine.events import Event
from remote.spine.stage_life import StageState

HISTORY = 120  # samples kept per GPU series (a sparkline's worth)
NOTES = 200  # console.info/warning/error messages kept per host
ALERTS = 100  # stats.alert incidents kept per host (each rule fires once per incident)


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
    model: str = ""  # what it serves (/v1/models)
    pid: int | None = None  # its pid on the box
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
    # `console bench matrix` (bench.matrix events): its cells by "name|T|c", and its progress
    # (done, total, eta_s), recommendations and time split
    matrix_cells: dict[str, dict[str, Any]] = field(default_factory=dict)
    matrix: dict[str, Any] = field(default_factory=dict)
    allreduce: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    bench_watch: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    notes: deque[Note] = field(default_factory=lambda: deque(maxlen=NOTES))
    # stats.alert incidents (remote/stats/alerts.py): ts, rule, message, advice, gpu, stage
    alerts: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=ALERTS))
    servers: dict[str, ServerState] = field(default_factory=dict)  # role -> its server
    # The box runner this console follows (pipeline.run): run_id, how (started, attached,
    # reattached, or found: the last one, ended before this console connected), config,
    # started, state.
    pipeline_run: dict[str, str] = field(default_factory=dict)
    charts: ChartData = field(default_factory=ChartData)  # series only the charts draw
    last_event: datetime | None = None

    def alerted_gpus(self) -> set[int]:
        """The GPUs an alert named: the mark beside their rows."""
        return {a["gpu"] for a in self.alerts if isinstance(a.get("gpu"), int)}

    def stage_names(self) -> list[str]:
        """Every stage row in pipeline order: the set-up steps the runner does before the
        pipeline (demo-setup), as they came, then the pipeline's stages."""
        order = stage_order()
        return [n for n in self.stages if n not in order] + list(order)

    def ordered_stages(self) -> list[StageState]:
        return [self.stages[n] for n in self.stage_names() if n in self.stages]

    def running_jobs(self) -> list[JobState]:
        return [j for j in self.jobs.values() if j.running]

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


def malformed(host: HostState, e: Event) -> set[str]:
    """A payload its kind's schema does not accept (a damaged or pre-schema session): said once
    as a note, the state left as it was."""
    host.notes.append(Note(e.ts, "error", f"malformed {e.kind} payload (not its schema); skipped"))
    return {NOTES_DOMAIN}
