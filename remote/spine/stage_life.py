"""A stage's life, folded once: its typed events (the job tail makes them from a box's
`@@eagle3` records: remote/jobs/stage_records.py) into the one StageState that the CLI's
outcome (remote/pipeline_runner.py), the TUI (console/tui/reducers.py), the report and the
lost-run account read. One vocabulary: pending, running, done, failed, skipped, not run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from remote.spine import event_types as et
from remote.spine import events as ev
from remote.spine.events import Event

# What the console named a stage's job before the box runner carried the whole pipeline as one
# job named `pipeline` (sessions and run directories of that time): `pipeline-<stage>`.
OLD_JOB_PREFIX = "pipeline-"
RUNNING, DONE, FAILED, SKIPPED, NOT_RUN = "running", "done", "failed", "skipped", "not run"

# What its records carry beyond progress, the latest of each (the Pipeline screen's columns).
METRIC_KEYS = ("loss", "epoch", "head", "tokens", "acc_0", "resumed_from")
RESULT_KEYS = ("mean_length", "rate", "per_position", "untrained_mean_length")


@dataclass
class StageState:
    name: str
    status: str = "pending"  # pending | running | done | failed | skipped | not run
    done: float = 0.0
    total: float | None = None
    unit: str = ""
    rate: float | None = None
    elapsed: float | None = None  # seconds into the stage's progress (its latest record)
    seconds: float | None = None
    outputs: Any = None
    reason: str = ""  # skipped / not run / pending: why
    error: str = ""  # failed: why
    run_id: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # METRIC_KEYS, RESULT_KEYS
    runs: list[str] = field(default_factory=list)  # every run its events named, oldest first
    result: dict[str, Any] = field(default_factory=dict)  # its end's summary (evaluate's figures)
    # From its manifest (stage.manifest, or a skip that carries it): size, count, when done.
    bytes: int | None = None
    outputs_count: int | None = None
    completed: str = ""
    argv: list[str] = field(default_factory=list)  # the latest start's command on the box

    @property
    def fraction(self) -> float | None:
        if self.status == DONE:
            return 1.0
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))


_STAGE_DATA = (et.StageStart, et.StageProgress, et.StageEnd, et.StageSkipped, et.StageNotRun,
               et.StageManifest)


# Said by the runner or the box about the stage, not by a run of the stage: no run of its own.
_NOT_ITS_RUN = (ev.STAGE_NOT_RUN, ev.STAGE_MANIFEST)


def fold(stages: dict[str, StageState], e: Event) -> bool | None:
    """One stage event into `stages`: whether it changed, None for a payload that is no stage's
    (a damaged or pre-schema session). A manifest never overrides a stage running now, nor a
    failure or not-run seen (no manifest is all a failed stage leaves)."""
    data = e.data()
    if not isinstance(data, _STAGE_DATA):
        return None
    st = stages.get(data.stage)
    if st is None:
        st = stages[data.stage] = StageState(data.stage)
    if isinstance(data, et.StageStart):
        st.status, st.done, st.total, st.rate, st.seconds, st.reason = RUNNING, 0.0, None, None, None, ""
        st.elapsed = st.bytes = st.outputs_count = None
        st.completed = st.error = ""
        st.metrics, st.result = {}, {}
        st.argv = [str(a) for a in data.argv or []]
        st.run_id = data.run_id or st.run_id
    elif isinstance(data, et.StageProgress):
        st.status = RUNNING if st.status == "pending" else st.status
        st.done = float(data.done or 0)
        st.total = None if data.total is None else float(data.total)
        st.unit = data.unit or st.unit
        st.rate = None if data.rate is None else float(data.rate)
        st.elapsed = None if data.elapsed is None else float(data.elapsed)
        for k in METRIC_KEYS:
            v = e.payload.get(k)
            if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                st.metrics[k] = v
    elif isinstance(data, et.StageEnd):
        st.status = DONE if data.ok else FAILED
        st.seconds = None if data.seconds is None else float(data.seconds)
        st.outputs = data.outputs
        st.error = "" if data.ok else str(data.error or f"{data.stage} failed")
        if isinstance(data.result, dict):
            st.result = dict(data.result)
            st.metrics.update({k: data.result[k] for k in RESULT_KEYS if k in data.result})
        if st.status == DONE and st.total:
            st.done = st.total
    elif isinstance(data, et.StageSkipped):
        st.status, st.reason = SKIPPED, data.reason
        _manifest_facts(st, data)
    elif isinstance(data, et.StageNotRun):
        st.status, st.reason = NOT_RUN, data.reason
    elif st.status == RUNNING:
        return False
    elif data.complete:
        st.status, st.reason = DONE, ""
        _manifest_facts(st, data)
    elif st.status not in (FAILED, NOT_RUN):
        st.status, st.reason = "pending", data.reason
        st.seconds = st.bytes = st.outputs_count = None
        st.completed = ""
    run_id = e.payload.get("run_id")
    if e.kind not in _NOT_ITS_RUN and isinstance(run_id, str) and run_id and run_id not in st.runs:
        st.runs.append(run_id)
    return True


def _manifest_facts(st: StageState, data: et.StageSkipped | et.StageManifest) -> None:
    if data.seconds is not None:
        st.seconds = float(data.seconds)
    if data.bytes is not None:
        st.bytes, st.outputs_count = data.bytes, data.outputs
    if data.completed:
        st.completed = data.completed


def run_ended(stages: dict[str, StageState], run_id: str, job_name: str, why: str) -> bool:
    """A stage still running when the run that carried it ended (killed, lost, or a session
    recorded before the runner said so): failed, not running for ever. Whether any changed."""
    ended = False
    for st in stages.values():
        if st.status == RUNNING and (run_id == st.run_id or run_id in st.runs
                                     or st.name == job_name.removeprefix(OLD_JOB_PREFIX)):
            st.status, st.reason, ended = FAILED, why, True
    return ended
