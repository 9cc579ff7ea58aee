"""The Pipeline screen's state: a stage's events, the box's word on a stage, and the box runner
this console follows. No Textual here. A stage is folded by the one fold every reader shares
(remote/spine/stage_life.py); these register it in REDUCERS (console/tui/reducers.py) and say
what changed.
"""

from __future__ import annotations

from console.tui.chart_data import fold as fold_charts
from console.tui.host_state import STAGES, HostState, malformed
from remote.spine import event_types as et
from remote.spine import stage_life
from remote.spine.events import Event


def stage(host: HostState, e: Event) -> set[str]:
    """A stage's own event, through the one fold (remote/spine/stage_life.py); then the series
    only the charts draw (the training loss)."""
    if stage_life.fold(host.stages, e) is None:
        return malformed(host, e)
    fold_charts(host.charts, e)
    return {STAGES}


def stage_box(host: HostState, e: Event) -> set[str]:
    """What the box says of a stage outside its own records: not reached by the runner
    (stage.not_run) or as its manifest stands (stage.manifest), through the same fold."""
    changed = stage_life.fold(host.stages, e)
    if changed is None:
        return malformed(host, e)
    return {STAGES} if changed else set()


def pipeline_run(host: HostState, e: Event) -> set[str]:
    data = e.data()
    if not isinstance(data, et.PipelineRun):
        return malformed(host, e)
    host.pipeline_run = {"run_id": data.run_id, "how": data.how, "config": data.config,
                         "started": data.started, "state": data.state}
    return {STAGES}
