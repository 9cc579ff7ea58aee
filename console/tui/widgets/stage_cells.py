"""The Pipeline screen's cells: a stage's status, progress bar, detail (progress, size from its
manifest, or why it did not run) and time; a run's label. Rich only, no Textual."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from console.tui.model import JobState, StageState
from console.tui.render import bar, elide_middle, fmt_num, fmt_pct, fmt_seconds, fmt_sig
from pipeline.progress import rate_means_something
from pipeline.units import fmt_bytes

STATUS_STYLE = {"pending": "dim", "running": "bold yellow", "done": "bold green", "failed": "bold red",
                "skipped": "cyan", "not run": "magenta"}


def stage_cells(st: StageState, width: int = 20) -> tuple[Text, Text, str, str]:
    status = Text(st.status, style=STATUS_STYLE.get(st.status, ""))
    frac = st.fraction
    progress = Text(bar(frac, width), style="green" if st.status == "done" else "yellow")
    if frac is not None:
        progress.append(f" {frac * 100:3.0f}%" if width < 12 else f" {frac * 100:5.1f}%")
    detail = f"{fmt_num(st.done, 0)}/{fmt_num(st.total, 0) if st.total else '?'} {st.unit}".strip()
    rate = shown_rate(st)
    if rate is not None:
        detail += f"  {fmt_sig(rate)} {st.unit}/s"
    elif st.elapsed is not None and st.status == "running":
        detail += f"  {fmt_seconds(st.elapsed)}"
    n = st.outputs_count
    size = (f"{fmt_bytes(st.bytes)} in {n} output{'' if n == 1 else 's'}" if st.bytes is not None
            else "")
    if st.status == "done" and size:
        # a stage known from its manifest has no progress of this session to show
        detail = f"{detail}  {size}" if st.total else size
    if st.status == "skipped":
        detail = "  ".join(d for d in (st.reason or "skipped", size) if d)
    if st.status in ("pending", "not run"):
        detail = st.reason
    return status, progress, detail, fmt_seconds(st.seconds)


def shown_rate(st: StageState) -> float | None:
    """The stage's rate where it means something (pipeline/progress.py: enough time and units),
    else None and its elapsed time is shown. A record of an older box carries a rate without
    its elapsed time: that time is about done/rate."""
    if not st.rate:
        return None
    elapsed = st.elapsed if st.elapsed is not None else st.done / st.rate
    return st.rate if rate_means_something(st.done, elapsed) else None


def metrics_cell(st: StageState, narrow: bool = False) -> str:
    """What the stage's records say beyond progress: loss and epoch while training, the
    evaluated head's acceptance once evaluate ends (narrow: the short names, so the last
    column is not cut at 80 columns)."""
    if narrow:
        return metrics_cell(st).replace("acc len ", "len ").replace("rate ", "r ")
    m = st.metrics
    parts = []
    if isinstance(m.get("loss"), (int, float)):
        parts.append(f"loss {fmt_sig(float(m['loss']))}")
    if m.get("epoch") is not None:
        parts.append(f"ep {m['epoch']}")
    if isinstance(m.get("resumed_from"), int) and st.status == "running":
        parts.append(f"resumed@{m['resumed_from']}")  # this run went on from a checkpoint
    if isinstance(m.get("mean_length"), (int, float)):
        parts.append(f"acc len {fmt_sig(float(m['mean_length']))}")
    if isinstance(m.get("rate"), (int, float)):
        parts.append(f"rate {fmt_pct(m['rate'])}")
    elif m.get("head") and st.status == "running":
        parts.append(f"head {m['head']}")
    return " ".join(parts)


def artifacts_line(outputs: list[Any], width: int) -> str:
    """The stage's outputs on about one line of `width`: each path elided in its middle (its root
    and its file name both kept), as many as fit, then how many more."""
    paths = [str(o.get("path", o)) if isinstance(o, dict) else str(o) for o in outputs]
    each = max(32, width // 2 - 4)  # two paths a line at most: enough of each to tell them apart
    shown: list[str] = []
    for i, path in enumerate(paths):
        item = elide_middle(path, each)
        rest = f" +{len(paths) - i} more"
        after = len(f" +{len(paths) - i - 1} more") if i < len(paths) - 1 else 0
        if shown and len(", ".join([*shown, item])) + after > width:
            return ", ".join(shown) + rest
        shown.append(item)
    return ", ".join(shown)


def run_label(job: JobState) -> str:
    rc = f" rc={job.returncode}" if job.returncode is not None else ""
    return f"{job.state}{rc}"


def short_run(run_id: str) -> str:
    """`20261203T000845Z-train-a51c51` as `00:08:45 a51c51`: when it started and which one."""
    head, _, rest = run_id.partition("-")
    if len(head) == 16 and head[8] == "T" and head.endswith("Z") and rest:
        return f"{head[9:11]}:{head[11:13]}:{head[13:15]} {rest.rsplit('-', 1)[-1]}"
    return run_id[:18]
