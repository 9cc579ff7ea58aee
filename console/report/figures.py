"""The report's charts, drawn with matplotlib (Agg, no display) into PNG data URIs, so the HTML
file stands alone: no script, no file beside it, nothing fetched when a colleague opens it.

Each function takes the series console/tui/chart_data.py gives the TUI's charts and returns a
data URI, or None when there is nothing to draw (the page then says so in words).
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any

from console.tui import chart_data as cd

OFFLINE, SERVED, BASE, MARK, LOSS = "#5b9a32", "#c2185b", "#757575", "#f9a825", "#0277bd"


def _pyplot() -> Any:
    """matplotlib on the Agg backend, imported only when a report is written (an optional
    extra: pip install 'eagle3-console[report]')."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _uri(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def close_all() -> None:
    """Close what a chart that failed half-way left open."""
    _pyplot().close("all")


def _figure(title: str, xlabel: str, ylabel: str) -> tuple[Any, Any]:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    ax.set_title(title, loc="left", fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def loss_curve(points: list[tuple[float, float]]) -> str | None:
    if not points:
        return None
    fig, ax = _figure("Training loss per step", "step", "loss")
    ax.plot([p[0] for p in points], [p[1] for p in points], color=LOSS, linewidth=1.4)
    return _uri(fig)


def acceptance_per_position(offline: list[float], served: list[float], served_name: str) -> str | None:
    if not offline and not served:
        return None
    fig, ax = _figure("Acceptance per draft position", "draft position", "acceptance rate")
    n = max(len(offline), len(served))
    if offline:
        ax.bar([i - 0.2 for i in range(len(offline))], offline, width=0.4, color=OFFLINE,
               label="offline (evaluate stage)")
    if served:
        ax.bar([i + 0.2 for i in range(len(served))], served, width=0.4, color=SERVED,
               label=f"served (vLLM counters: {served_name})")
    ax.set_xticks(range(n))
    ax.set_ylim(0, 1)
    ax.legend(loc="upper right", fontsize=8)
    return _uri(fig)


def speedup_vs_concurrency(series: cd.ConcurrencySeries) -> str | None:
    """Output tok/s per label (left) and the speedup (right), log2 concurrency, crossover marked."""
    if not series.throughput:
        return None
    plt = _pyplot()
    if not series.speedup:  # no speedup measured: its axes would be a chart without data
        fig, tok = plt.subplots(1, 1, figsize=(5.5, 3.8))
        spd = None
    else:
        fig, (tok, spd) = plt.subplots(1, 2, figsize=(11, 3.8))
    concs = sorted({c for pts in series.throughput.values() for c, _ in pts})
    for label, pts in series.throughput.items():
        color = BASE if cd.is_baseline(label) else SERVED
        tok.plot([c for c, _ in pts], [v for _, v in pts], marker="o", color=color, label=label)
    tok.set_title("Output tokens/s vs concurrency", loc="left", fontsize=11)
    tok.set_ylabel("output tok/s")
    tok.legend(fontsize=8)
    if spd is not None:
        spd.set_title("Speedup vs concurrency", loc="left", fontsize=11)
        spd.set_ylabel("speedup (x)")
        spd.plot([c for c, _ in series.speedup], [s for _, s in series.speedup], marker="o", color=SERVED,
                 label=series.speculative)
        spd.axhline(1.0, color=BASE, linestyle="--", linewidth=1, label="no gain")
        spd.legend(fontsize=8)
    for ax in (tok, spd) if spd is not None else (tok,):
        ax.set_xscale("log", base=2)
        ax.set_xticks(concs, [str(c) for c in concs])
        ax.set_xlabel("concurrency")
        ax.grid(True, alpha=0.3)
        if series.crossover:
            ax.axvline(series.crossover, color=MARK, linewidth=1.5)
    if series.crossover and spd is not None:
        spd.annotate(f"crossover ≈ {series.crossover:.3g}", (series.crossover, 1.0),
                     xytext=(6, 10), textcoords="offset points", color="#8d6e00", fontsize=9)
    fig.tight_layout()
    return _uri(fig)


def matrix_speedups(grid: cd.MatrixGrid) -> str | None:
    """`console bench matrix`: the speedup of each (draft, K) server over no speculation, bars
    grouped by temperature and concurrency, the no-gain line at 1."""
    if not grid.rows or not grid.columns:
        return None
    fig, ax = _figure("Speedup over no speculation, per draft and K", "temperature, concurrency",
                      "speedup (x)")
    fig.set_size_inches(max(7.5, 1.6 * len(grid.columns) + 2), 3.8)
    width = 0.8 / len(grid.rows)
    colors = _pyplot().get_cmap("tab10")
    for i, (name, values) in enumerate(grid.rows):
        xs = [j + (i - (len(grid.rows) - 1) / 2) * width for j in range(len(grid.columns))]
        ax.bar([x for x, v in zip(xs, values, strict=True) if v is not None],
               [v for v in values if v is not None], width, label=name, color=colors(i % 10))
    ax.axhline(1.0, color=BASE, linestyle="--", linewidth=1)
    ax.set_xticks(range(len(grid.columns)), [f"T={t:g}, c={c}" for t, c in grid.columns])
    ax.legend(fontsize=8, ncol=min(3, len(grid.rows)))
    fig.tight_layout()
    return _uri(fig)


def acceptance_over_time(windows: list[tuple[float, float, float | None]]) -> str | None:
    if not windows:
        return None
    fig, ax = _figure("Acceptance over time (bench watch)", "seconds watched", "acceptance rate")
    t0 = windows[0][0]
    ax.plot([t - t0 for t, _, _ in windows], [r for _, r, _ in windows], color=SERVED, marker=".")
    ax.set_ylim(0, 1)
    return _uri(fig)


def gpu_history(series: dict[int, list[tuple[float, float, float]]]) -> str | None:
    if not series:
        return None
    plt = _pyplot()
    fig, (util, mem) = plt.subplots(1, 2, figsize=(11, 3.4))
    for i, points in series.items():
        util.plot([p[0] for p in points], [p[1] for p in points], label=f"GPU {i}", linewidth=1)
        mem.plot([p[0] for p in points], [p[2] for p in points], label=f"GPU {i}", linewidth=1)
    for ax, title in ((util, "GPU utilisation %"), (mem, "GPU memory %")):
        ax.set_title(f"{title} (last {cd.GPU_WINDOW_S // 60} min of the session)", loc="left", fontsize=11)
        ax.set_xlabel("seconds (0 = last sample)")
        ax.set_ylim(0, 100)
        ax.grid(True, alpha=0.3)
    util.legend(fontsize=7, ncol=max(1, math.ceil(len(series) / 4)))
    fig.tight_layout()
    return _uri(fig)
