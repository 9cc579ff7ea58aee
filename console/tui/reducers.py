"""The reducers: how each kind of event changes a host's state, and the table of them. No
Textual here.

Each reducer mutates a HostState (console/tui/host_state.py) in place and returns the domains
it changed; payloads come from other machines, so every field is read defensively. REDUCERS maps
an event kind to its reducer, which also folds what the charts draw from it (chart_data.fold);
a stage's events go through the one fold every reader shares (remote/spine/stage_life.py).
"""

from __future__ import annotations

from typing import Any

from console.tui.chart_data import fold as fold_charts
from console.tui.host_state import (
    ALLREDUCE,
    BENCH,
    CONNECTION,
    JOBS,
    LOG,
    NOTES_DOMAIN,
    PATCH,
    PROBES,
    STAGES,
    STATS,
    GpuState,
    HostState,
    JobState,
    Note,
    PatchState,
    Reducer,
    ServerState,
    malformed,
)
from pipeline.progress import PREFIX as RECORD_PREFIX
from remote.spine import event_types as et
from remote.spine import events as ev
from remote.spine import stage_life
from remote.spine.events import Event
from remote.spine.sanitize import visible

BENCH_WATCH_KIND = "bench.watch"  # `console bench watch`: acceptance over one scrape window


def _num(value: Any, default: float = 0.0) -> float:
    if isinstance(value, bool):
        return float(value)
    number = _opt_num(value)
    return default if number is None else number


def _opt_num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


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
        return malformed(host, e)
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
    # CPU and memory history next to load: the Stats screen of a host without GPUs.
    if host.cpu is not None:
        host.cpu_history.append(host.cpu)
    if host.mem_used is not None and host.mem_total:
        host.mem_history.append(100.0 * host.mem_used / host.mem_total)
    fold_charts(host.charts, e)
    return {STATS}


def _alert(host: HostState, e: Event) -> set[str]:
    """An incident (remote/stats/alerts.py): kept for the banner and the GPU's mark."""
    p = e.payload
    gpu = p.get("gpu")
    host.alerts.append({
        "ts": e.ts, "rule": visible(str(p.get("rule") or "?")),
        "message": visible(str(p.get("message") or "")), "advice": visible(str(p.get("advice") or "")),
        "gpu": gpu if isinstance(gpu, int) and not isinstance(gpu, bool) else None,
        "stage": visible(str(p["stage"])) if p.get("stage") is not None else None,
    })
    return {STATS}


def job_of(host: HostState, p: dict[str, Any]) -> JobState:
    """The job an event's payload names, made on its first event."""
    run_id = visible(str(p.get("run_id") or p.get("name") or "?"))  # job.line is not sanitised
    job = host.jobs.get(run_id)
    if job is None:
        job = JobState(run_id=run_id, name=visible(str(p.get("name") or run_id)))
        host.jobs[run_id] = job
    return job


def _job(host: HostState, e: Event) -> set[str]:
    p = e.payload
    job = job_of(host, p)
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
        rc = "" if job.returncode is None else f", returncode {job.returncode}"
        if stage_life.run_ended(host.stages, job.run_id, job.name,
                                f"its run {job.state}{rc} before the stage ended"):
            return {JOBS, STAGES}
    return {JOBS}


def _stage(host: HostState, e: Event) -> set[str]:
    """A stage's event (its own, the runner's not-run, the box's manifest) through the one fold
    every reader shares (remote/spine/stage_life.py); then the series only the charts draw."""
    changed = stage_life.fold(host.stages, e)
    if changed is None:
        return malformed(host, e)
    fold_charts(host.charts, e)
    return {STAGES} if changed else set()


def _pipeline_run(host: HostState, e: Event) -> set[str]:
    data = e.data()
    if not isinstance(data, et.PipelineRun):
        return malformed(host, e)
    host.pipeline_run = {"run_id": data.run_id, "how": data.how, "config": data.config,
                         "started": data.started, "state": data.state}
    return {STAGES}


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


def _bench_matrix(host: HostState, e: Event) -> set[str]:
    """A matrix's plan (a new matrix: the cells shown so far are another's, unless it continues
    a file), each cell measured, its end."""
    p = e.payload
    phase = p.get("phase")
    if phase == "plan":
        if host.matrix.get("result_file") != p.get("result_file"):
            host.matrix_cells.clear()
        host.matrix = {k: p.get(k) for k in ("total", "eta_s", "result_file")} | {"done": 0}
    elif phase == "cell":
        key = f"{p.get('name')}|{p.get('temperature')}|{p.get('concurrency')}"
        host.matrix_cells[key] = dict(p)
        if p.get("found") and host.matrix.get("result_file") != p.get("result_file"):
            host.matrix = {"result_file": p.get("result_file")}
        host.matrix.update({k: p[k] for k in ("done", "total", "eta_s", "result_file") if k in p})
    elif phase == "done":
        host.matrix.update({k: p.get(k) for k in
                            ("recommendations", "time_split", "complete", "failed_servers",
                             "result_file")} | {"eta_s": 0.0, "finished": True})
    return {BENCH}


def _bench_watch(host: HostState, e: Event) -> set[str]:
    host.bench_watch.append(dict(e.payload))
    fold_charts(host.charts, e)
    return {BENCH}


def _serve(host: HostState, e: Event) -> set[str]:
    data = e.data()
    if not isinstance(data, (et.ServeStarting, et.ServeReady, et.ServeFailed, et.ServeStopped)):
        return malformed(host, e)
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
        srv.pid = data.pid if data.pid is not None else srv.pid
        srv.state = "starting" if isinstance(data, et.ServeStarting) else "ready"
        if isinstance(data, et.ServeReady):
            srv.seconds = float(data.seconds) if data.seconds is not None else None
            srv.model = data.model or srv.model
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


def note_of(e: Event) -> Note:
    text = str(e.payload.get("message") or e.payload.get("summary") or "")
    return Note(e.ts, e.kind.rsplit(".", 1)[-1], text)


def note(host: HostState, e: Event) -> set[str]:
    host.notes.append(note_of(e))
    return {NOTES_DOMAIN}


# A row per reducer: the event kinds it folds.
REDUCERS: dict[str, Reducer] = {kind: reducer for reducer, kinds in (
    (_connection, (ev.CONNECTION_UP, ev.CONNECTION_DOWN, ev.CONNECTION_RETRY)),
    (_stats, (ev.STATS_SAMPLE,)),
    (_alert, (ev.STATS_ALERT,)),
    (_job, (ev.JOB_STARTED, ev.JOB_LINE, ev.JOB_EXIT)),
    (_stage, (ev.STAGE_START, ev.STAGE_PROGRESS, ev.STAGE_END, ev.STAGE_SKIPPED,
              ev.STAGE_NOT_RUN, ev.STAGE_MANIFEST)),
    (_pipeline_run, (ev.PIPELINE_RUN,)),
    (_probe, (ev.PROBE_RESULT, ev.PROBE_ERROR)),
    (_patch, tuple(_PATCH_STATUS)),
    (_bench, (ev.BENCH_POINT, ev.BENCH_SUMMARY)),
    (_bench_watch, (BENCH_WATCH_KIND,)),
    (_bench_matrix, (ev.BENCH_MATRIX,)),
    (_allreduce, (ev.ALLREDUCE_RESULT,)),
    (_serve, (ev.SERVE_STARTING, ev.SERVE_READY, ev.SERVE_FAILED, ev.SERVE_STOPPED)),
    (note, (ev.CONSOLE_INFO, ev.CONSOLE_WARNING, ev.CONSOLE_ERROR)),
) for kind in kinds}
