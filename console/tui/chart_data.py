"""What the charts draw, folded from the event stream and read from the folded state. No Textual.

The TUI's charts (console/tui/widgets/charts.py) and the HTML report (console/report/) draw
the same series, so both read them from here: a live box, a replay and a report of the session
file cannot disagree. Most series are already in the state (bench points, the evaluate stage's
per-position acceptance); what the state did not keep is folded here, from the events the
reducers of console/tui/reducers.py see (`fold`, chained after them):
- the training loss per step (the state kept only the latest value);
- `bench watch` acceptance per window, over the time watched (the windows' own lengths);
- per-GPU utilisation and memory over the last minutes, one point per second: a box sends
  up to 10 samples a second, a chart has about a hundred columns to show five minutes in, and
  a point per second also bounds how often the chart changes (it redraws at most once a second).

Every series is tuples in bounded containers: a replay's seek checkpoints deep-copy the state
every 512 events, and tuples of floats are shared by the copies, not copied.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pipeline.stages import TRAIN
from remote.spine import events as ev
from remote.spine.events import Event

LOSS_POINTS = 1024  # past this the loss curve is thinned to every other point (its shape stays)
GPU_WINDOW_S = 300  # "the last minutes": the GPU charts span five minutes
WATCH_POINTS = 240  # bench watch windows kept
BASELINE_LABELS = ("baseline", "base", "no-spec", "nospec", "off", "vanilla")
T = TypeVar("T")


@dataclass
class ChartData:
    """The series folded here for one host; each `*_version` moves when its chart must redraw."""

    loss: list[tuple[float, float]] = field(default_factory=list)  # (step, loss)
    loss_stride: int = 1  # keep every loss_stride-th progress record (doubles when thinned)
    loss_seen: int = 0
    loss_version: int = 0
    loss_started: bool = False  # a train stage started: its first progress says resumed or new
    watch: deque[tuple[float, float, float | None]] = field(
        default_factory=lambda: deque(maxlen=WATCH_POINTS))  # (s watched, rate, mean length)
    watched: float = 0.0  # seconds of bench watch windows folded so far
    # per GPU, closed one-second buckets (unix second, mean util %, mean memory %)
    gpu: dict[int, deque[tuple[int, float, float]]] = field(default_factory=dict)
    # per GPU, the bucket being filled: (unix second, util sum, memory sum, samples)
    gpu_open: dict[int, tuple[int, float, float, int]] = field(default_factory=dict)
    gpu_version: int = 0


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def fold(charts: ChartData, e: Event) -> bool:
    """Fold one event the model's reducers accepted; True when a series changed."""
    kind = e.kind
    if kind == ev.STATS_SAMPLE:
        return _fold_gpus(charts, e)
    if kind in (ev.STAGE_START, ev.STAGE_PROGRESS) and e.payload.get("stage") == TRAIN:
        return _fold_loss(charts, e)
    if kind == ev.BENCH_WATCH:
        # Time on the axis is watched time: each window adds its own length (the payload's
        # `seconds`, measured between the two scrapes), not the clock at which it was folded;
        # an idle window (nothing drafted) counts its time but has no rate to draw.
        charts.watched += _num(e.payload.get("seconds")) or 0.0
        acc = e.payload.get("acceptance")
        rate = _num(acc.get("rate")) if isinstance(acc, dict) and acc.get("drafts") != 0 else None
        if rate is None or not isinstance(acc, dict):
            return False
        charts.watch.append((charts.watched, rate, _num(acc.get("mean_length"))))
        return True
    return False


def _fold_loss(charts: ChartData, e: Event) -> bool:
    """A training run's loss per step. A run that resumed from a checkpoint (its records carry
    `resumed_from` S) continues the curve: the points up to S stay, the ones past S (steps the
    killed run did after its checkpoint, done again now) go. Any other start is a new curve."""
    if e.kind == ev.STAGE_START:
        charts.loss_started = True
        return False
    loss, step = _num(e.payload.get("loss")), _num(e.payload.get("done"))
    if loss is None or step is None:
        return False
    if charts.loss_started:
        charts.loss_started = False
        back = _num(e.payload.get("resumed_from"))
        kept = [p for p in charts.loss if back is not None and p[0] <= back]
        charts.loss, charts.loss_stride = kept, 1
        charts.loss_seen = len(kept)
        charts.loss_version += 1
    charts.loss_seen += 1
    if (charts.loss_seen - 1) % charts.loss_stride:
        return False
    charts.loss.append((step, loss))
    if len(charts.loss) > LOSS_POINTS:
        charts.loss = charts.loss[::2]
        charts.loss_stride *= 2
    charts.loss_version += 1
    return True


def _fold_gpus(charts: ChartData, e: Event) -> bool:
    gpus = e.payload.get("gpus")
    if not isinstance(gpus, list):
        return False
    second = int(e.ts.timestamp())
    opened = False
    for g in gpus:
        if not isinstance(g, dict):
            continue
        index, util = _num(g.get("index")), _num(g.get("util"))
        used, total = _num(g.get("mem_used")), _num(g.get("mem_total"))
        if index is None or util is None:
            continue
        mem = 100.0 * used / total if used is not None and total else 0.0
        i = int(index)
        current = charts.gpu_open.get(i)
        if current is not None and current[0] == second:
            charts.gpu_open[i] = (second, current[1] + util, current[2] + mem, current[3] + 1)
            continue
        series = charts.gpu.setdefault(i, deque(maxlen=GPU_WINDOW_S))
        if current is not None:
            t, u, m, n = current
            series.append((t, u / n, m / n))
        while series and series[0][0] < second - GPU_WINDOW_S:
            series.popleft()
        charts.gpu_open[i] = (second, util, mem, 1)
        opened = True
    if opened:
        charts.gpu_version += 1
    return opened


# -- series read from the state ------------------------------------------------------------------

def gpu_series(charts: ChartData) -> dict[int, list[tuple[float, float, float]]]:
    """Per GPU: (seconds before the newest sample, util %, memory %), oldest first, over the last
    GPU_WINDOW_S; the bucket being filled counts with what it has so far."""
    out: dict[int, list[tuple[float, float, float]]] = {}
    newest = max((b[0] for b in charts.gpu_open.values()), default=None)
    if newest is None:
        return out
    for i in sorted(charts.gpu_open):
        t, u, m, n = charts.gpu_open[i]
        points = [(float(s - newest), util, mem) for s, util, mem in charts.gpu.get(i, ())
                  if s >= newest - GPU_WINDOW_S]
        points.append((float(t - newest), u / n, m / n))
        out[i] = points
    return out


def thin(points: list[T], most: int) -> list[T]:
    """At most `most` points, evenly picked, first and last kept: a chart cannot show more
    points than it has pixel columns, and each one costs it to draw."""
    if most < 2 or len(points) <= most:
        return points
    step = (len(points) - 1) / (most - 1)
    return [points[round(k * step)] for k in range(most)]


def is_baseline(label: Any) -> bool:
    return str(label or "").lower() in BASELINE_LABELS


def speedups(points: list[dict[str, Any]]) -> list[tuple[str, Any, float]]:
    """(label, concurrency, speedup) of each speculative point over the baseline label's output
    tokens/s at the same concurrency."""
    base = {p.get("concurrency"): p.get("output_tok_s") for p in points
            if is_baseline(p.get("label")) and isinstance(p.get("output_tok_s"), (int, float))}
    out = []
    for p in points:
        b = base.get(p.get("concurrency"))
        v = p.get("output_tok_s")
        if is_baseline(p.get("label")) or not b or not isinstance(v, (int, float)):
            continue
        out.append((str(p.get("label")), p.get("concurrency"), float(v) / float(b)))
    return out


def summary_speedups(summary: dict[str, Any]) -> list[tuple[str, Any, float]]:
    """The bench comparison's own rows ({concurrency, speedup}), when the summary has them."""
    rows = summary.get("rows")
    label = str(summary.get("spec_label") or summary.get("label") or "speculative")
    if not isinstance(rows, list):
        return []
    return [(label, r.get("concurrency"), float(r["speedup"])) for r in rows
            if isinstance(r, dict) and isinstance(r.get("speedup"), (int, float))]


@dataclass
class ConcurrencySeries:
    """Throughput per label and speedup vs concurrency, and where speculation stops paying."""

    throughput: dict[str, list[tuple[int, float]]]  # label -> (concurrency, output tok/s)
    speedup: list[tuple[int, float]]  # (concurrency, speedup) of the speculative label
    speculative: str
    crossover: float | None  # the concurrency where the speedup crosses 1.0, interpolated
    verdict: str  # one line: where it crosses, or that it does not in the measured range


def concurrency_series(points: list[dict[str, Any]], summary: dict[str, Any] | None = None) -> ConcurrencySeries:
    throughput: dict[str, list[tuple[int, float]]] = {}
    for p in points:
        conc, tok = p.get("concurrency"), _num(p.get("output_tok_s"))
        if isinstance(conc, int) and conc > 0 and tok is not None:
            throughput.setdefault(str(p.get("label") or "?"), []).append((conc, tok))
    for series in throughput.values():
        series.sort()
    rows = summary_speedups(summary or {}) or speedups(points)
    label = rows[-1][0] if rows else ""
    speedup = sorted((int(c), s) for lab, c, s in rows if lab == label and isinstance(c, int) and c > 0)
    cross, verdict = crossover(speedup)
    return ConcurrencySeries(throughput, speedup, label, cross, verdict)


def crossover(speedup: list[tuple[int, float]]) -> tuple[float | None, str]:
    """Where the speedup first falls below 1.0 (`console bench compare`'s own rule and its
    interpolation in log2 of the concurrency), and a line saying so."""
    from remote.bench.compare import find_crossover

    if not speedup:
        return None, "no speedup measured (needs a baseline and a speculative run)"
    first, last_paying, estimate = find_crossover(speedup)
    lo, hi = speedup[0][0], speedup[-1][0]
    if first is None:
        return None, f"no crossover: speculation pays at every concurrency measured ({lo}-{hi})"
    if last_paying is None:
        return None, f"no crossover: speculation does not pay at any concurrency measured ({lo}-{hi})"
    return estimate, f"crossover ≈ concurrency {estimate:.3g}: speculation pays up to {last_paying}, not at {first}"


def served_per_position(points: list[dict[str, Any]]) -> tuple[list[float], str]:
    """The latest speculative point's per-position acceptance (vLLM's counters), and its name."""
    for p in reversed(points):
        acc = p.get("acceptance")
        per = acc.get("per_position") if isinstance(acc, dict) else None
        if isinstance(per, list) and per:
            values = [_num(v) for v in per]
            return [v if v is not None else 0.0 for v in values], \
                f"{p.get('label')}, concurrency {p.get('concurrency')}"
    return [], ""


def offline_per_position(metrics: dict[str, Any]) -> list[float]:
    """The evaluate stage's per-position acceptance (the pipeline's offline estimate)."""
    per = metrics.get("per_position")
    if not isinstance(per, list):
        return []
    values = [_num(v) for v in per]
    return [v if v is not None else 0.0 for v in values]


@dataclass
class MatrixGrid:
    """A bench matrix as the Bench screen and the report draw it: one row per (draft, K) server,
    one column per (temperature, concurrency), each the speedup over the baseline (None: not
    measured yet); the baseline's own row is left out (1.0 by definition)."""

    columns: list[tuple[float, int]]
    rows: list[tuple[str, list[float | None]]]
    recommendations: list[str]


def matrix_grid(cells: dict[str, dict[str, Any]], matrix: dict[str, Any]) -> MatrixGrid:
    columns: list[tuple[float, int]] = []
    rows: dict[str, dict[tuple[float, int], float | None]] = {}
    for cell in cells.values():
        t, c = _num(cell.get("temperature")), cell.get("concurrency")
        if t is None or not isinstance(c, int):
            continue
        if (t, c) not in columns:
            columns.append((t, c))
        if cell.get("draft") == "none":
            continue
        rows.setdefault(str(cell.get("name")), {})[(t, c)] = _num(cell.get("speedup"))
    columns.sort()
    recs = matrix.get("recommendations")
    return MatrixGrid(columns, [(name, [v.get(col) for col in columns]) for name, v in rows.items()],
                      [str(r) for r in recs] if isinstance(recs, list) else [])
