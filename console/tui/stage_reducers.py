"""The Pipeline screen's state: reducers for a stage's events, the box's word on a stage, and
the box runner this console follows. No Textual here.

Apart from the other reducers (console/tui/reducers.py, which registers these in REDUCERS)
because a stage is folded from several sources (its own records, the runner's not-run, the
manifest on the box) with rules of their own, and what its records carry beyond progress (loss,
epoch, acceptance, its runs) is folded after them.
"""

from __future__ import annotations

from console.tui.chart_data import fold as fold_charts
from console.tui.host_state import STAGES, HostState, StageState, malformed
from remote.spine import event_types as et
from remote.spine import events as ev
from remote.spine.events import Event


def stage(host: HostState, e: Event) -> set[str]:
    data = e.data()
    if not isinstance(data, (et.StageStart, et.StageProgress, et.StageEnd, et.StageSkipped)):
        return malformed(host, e)
    st = host.stages.get(data.stage)
    if st is None:
        st = StageState(data.stage)
        host.stages[data.stage] = st
    if isinstance(data, et.StageStart):
        st.status, st.done, st.total, st.rate, st.seconds, st.reason = "running", 0.0, None, None, None, ""
        st.elapsed = None
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
        st.elapsed = None if data.elapsed is None else float(data.elapsed)
    elif isinstance(data, et.StageEnd):
        st.status = "done" if data.ok else "failed"
        st.seconds = None if data.seconds is None else float(data.seconds)
        st.outputs = data.outputs
        if st.status == "done" and st.total:
            st.done = st.total
    else:
        st.status, st.reason = "skipped", data.reason
        _manifest_facts(st, data)
    _stage_metrics(st, e)
    fold_charts(host.charts, e)  # the series only the charts draw (the training loss)
    return {STAGES}


def _manifest_facts(st: StageState, data: et.StageSkipped | et.StageManifest) -> None:
    if data.seconds is not None:
        st.seconds = float(data.seconds)
    if data.bytes is not None:
        st.bytes, st.outputs_count = data.bytes, data.outputs
    if data.completed:
        st.completed = data.completed


def stage_box(host: HostState, e: Event) -> set[str]:
    """What the box says of a stage outside its own records: not reached by the runner
    (stage.not_run) or as its manifest stands (stage.manifest). A manifest never overrides a
    stage running now, nor a failure or a not-run this console saw (no manifest is all a
    failed stage leaves); a complete one is done, with its time and size."""
    data = e.data()
    if not isinstance(data, (et.StageNotRun, et.StageManifest)):
        return malformed(host, e)
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


def pipeline_run(host: HostState, e: Event) -> set[str]:
    data = e.data()
    if not isinstance(data, et.PipelineRun):
        return malformed(host, e)
    host.pipeline_run = {"run_id": data.run_id, "how": data.how, "config": data.config,
                         "started": data.started, "state": data.state}
    return {STAGES}


# -- what the stage records carry beyond progress ------------------------------------------------
# Folded after `stage` (which folds status and progress): loss, epoch, the evaluated head's
# acceptance and the runs a stage's events name, for the Pipeline screen's columns and the Bench
# screen's offline acceptance.
METRIC_KEYS = ("loss", "epoch", "head", "tokens", "acc_0", "resumed_from")
RESULT_KEYS = ("mean_length", "rate", "per_position", "untrained_mean_length")


def _stage_metrics(st: StageState, e: Event) -> None:
    p = e.payload
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

