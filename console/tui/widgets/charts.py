"""The TUI's charts, drawn with textual-plot (docs/charts.md says why that widget).

Each chart is a `Chart` (a PlotWidget that never takes focus: its pan and zoom keys would take
the arrows and `r` from the screen) fed by a pure function of the state (console/tui/chart_data.py
has the series). A chart redraws only when it is shown and its data changed: the views call
`update` only while on screen (app.py posts state to the visible view alone), and `update`
compares a key of what it would draw with the last one drawn. The GPU charts' key moves once a
second (one point per second, chart_data.py), not with each sample.
Drawing: every series is thinned to the chart's pixel columns, and the canvases' per-pixel
refreshes are batched into one each (textual-hires-canvas refreshes the widget per pixel set:
measured 116 -> 41 ms for 8 lines of 60 points at 80x15 on this machine under load).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any, Self

from textual.containers import Horizontal
from textual.geometry import Region, Size
from textual.widget import Widget
from textual_hires_canvas import Canvas
from textual_plot import HiResMode, PlotWidget
from textual_plot.axis_formatter import AxisFormatter, NumericAxisFormatter

from console.tui import chart_data as cd
from console.tui.model import HostState
from console.tui.render import fmt_pct, fmt_sig
from pipeline.stages import EVALUATE

# Colours as hex: a named colour is an ANSI colour in a plot (drawn with the terminal's palette)
# but a CSS colour in a title's markup, and the key in the title must match its line.
GPU_STYLES = ("#4fc3f7", "#f06292", "#aed581", "#ffd54f", "#9575cd", "#ff8a65", "#e0e0e0", "#4db6ac")
OFFLINE_STYLE, SERVED_STYLE, BASE_STYLE, MARK_STYLE = "#9ccc65", "#f06292", "#9e9e9e", "#ffd54f"
LOSS_STYLE = "#4fc3f7"


class Labels(AxisFormatter):
    """Ticks at given positions with given labels (concurrency on a log2 axis, positions)."""

    def __init__(self, labels: dict[float, str]) -> None:
        self.labels = labels

    def get_ticks(self, min_: float, max_: float, max_ticks: int = 8) -> list[float]:
        ticks = [t for t in sorted(self.labels) if min_ <= t <= max_]
        step = max(1, math.ceil(len(ticks) / max(1, max_ticks)))
        return ticks[::step]

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        return [self.labels.get(t, f"{t:g}") for t in ticks]


class Chart(PlotWidget, can_focus=False):
    """One plot, redrawn only when what it shows changed (see the module docstring)."""

    DEFAULT_CSS = """
    Chart { height: 12; border: round $primary-darken-2; border-title-color: $text; }
    """

    def __init__(self, title: str, **kwargs: Any) -> None:
        super().__init__(allow_pan_and_zoom=False, **kwargs)
        self.title = title
        self.border_title = title
        self._key: object = None
        self._dirty = True  # data or style changed since the canvases were last drawn
        self._theme: object = None
        self._drawn_sizes: list[Size] = []  # the canvases' sizes at the last draw after a layout
        self._relaid = True  # laid out since the last draw
        self.draws = 0  # how many times the data was (re)drawn: tests and benchmarks read it

    def on_mount(self) -> None:
        super().on_mount()
        self.margin_top, self.margin_bottom, self.margin_left = 0, 2, 7

    def update(self, key: object, draw: Callable[[Chart], None]) -> None:
        """Draw with `draw(self)` unless `key` is what was drawn last."""
        if key == self._key:
            return
        self._key = key
        self.draws += 1
        self._dirty = True
        self.clear()
        self.set_xticks(None)
        self.set_x_formatter(NumericAxisFormatter())
        self.set_xlimits(None, None)
        self.set_ylimits(None, None)
        draw(self)

    @property
    def columns(self) -> int:
        """What a series is thinned to: the terminal's braille pixel columns (two per cell), at
        least as many as the plot has, whatever its layout is when it is drawn."""
        return max(32, 2 * self.app.size.width)

    def notify_style_update(self) -> None:
        """PlotWidget redraws on every style update, and showing a screen updates its styles
        (focus-within and the like): redraw only when the theme, which gives the plot's
        colours, changed."""
        theme = (self.app.theme, self.app.current_theme.dark)
        if theme != self._theme:
            self._theme = theme
            self._dirty = True
            super().notify_style_update()
        else:  # the widget's own style caches, which PlotWidget's override does not clear
            Widget.notify_style_update(self)

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        if layout:  # PlotWidget redraws after a layout, at the canvases' new sizes
            self._relaid = True
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def render(self) -> Any:
        """PlotWidget redraws its canvases inside its own render whenever its layout is
        refreshed, and the canvases' refreshes then cost a second screen update: a switch back
        to a screen would paint twice. Shown again at the same size with the same data (what
        this chart draws changes only through `update` and a new theme, which mark it dirty),
        the canvases already hold the plot: nothing is redrawn. A redraw refreshes each canvas
        once for the whole plot, not once per pixel set."""
        if not (self._dirty or self._relaid):
            return ""  # nothing PlotWidget would redraw
        canvases = list(self.query(Canvas))
        sizes = [c.size for c in canvases]
        if not self._dirty and all(sizes) and sizes == self._drawn_sizes:
            self._relaid = False
            return ""
        with ExitStack() as stack:
            for canvas in canvases:
                stack.enter_context(canvas.batch_refresh())
            drawn = super().render()
        if self._relaid:  # the canvases were fitted to their sizes before this draw
            self._drawn_sizes = sizes
        self._dirty = self._relaid = False
        return drawn

    def line(self, xs: Sequence[float], ys: Sequence[float], style: str) -> None:
        if xs:
            self.plot(list(xs), list(ys), line_style=style, hires_mode=HiResMode.BRAILLE)


def _title(text: str, *keys: tuple[str, str]) -> str:
    """A title with a colour key per series (the legend widget would cover the plot)."""
    return text + "".join(f"  [{style}]■[/] {name}" for name, style in keys)


# -- the charts ------------------------------------------------------------------------------------

def draw_loss(chart: Chart, host: HostState) -> bool:
    points = host.charts.loss
    if not points:
        return False
    step, loss = points[-1]
    chart.border_title = f"Loss {loss:.4g} at step {step:g}"  # fits the chart's 30 columns

    def draw(c: Chart) -> None:
        shown = cd.thin(points, c.columns)
        c.line([p[0] for p in shown], [p[1] for p in shown], LOSS_STYLE)
        c.set_xlabel("step")

    chart.update(host.charts.loss_version, draw)
    return True


def draw_acceptance(chart: Chart, host: HostState) -> bool:
    """Offline (the evaluate stage) beside served (vLLM's counters), per draft position."""
    st = host.stages.get(EVALUATE)
    offline = cd.offline_per_position(st.metrics if st is not None else {})
    served, where = cd.served_per_position(host.bench_points)
    if not offline and not served:
        return False
    keys = [(n, s) for n, s, v in (("offline", OFFLINE_STYLE, offline), (f"served ({where})", SERVED_STYLE, served))
            if v]
    chart.border_title = _title("Acceptance per draft position", *keys)

    def draw(c: Chart) -> None:
        n = max(len(offline), len(served))
        for values, dx, style in ((offline, -0.2, OFFLINE_STYLE), (served, 0.2, SERVED_STYLE)):
            if values:
                c.bar([i + dx for i in range(len(values))], values, width=0.38, bar_style=style)
        c.set_ylimits(0.0, 1.0)
        c.set_xlimits(-0.6, n - 0.4)
        c.set_xticks([float(i) for i in range(n)])
        c.set_x_formatter(Labels({float(i): str(i) for i in range(n)}))
        c.set_xlabel("draft position")

    chart.update((tuple(offline), tuple(served)), draw)
    return True


def draw_concurrency(throughput: Chart, speedup: Chart, host: HostState) -> tuple[bool, bool]:
    """Output tokens/s per label, and the speedup, vs concurrency (log2 axis), the crossover
    (where the speedup falls below 1) marked on both. Whether each has data to show: no
    speedup measured (no baseline at the same concurrency), no speedup chart."""
    series = cd.concurrency_series(host.bench_points, host.bench_summary)
    if not series.throughput:
        return False, False
    concs = sorted({c for pts in series.throughput.values() for c, _ in pts})
    labels = {math.log2(c): str(c) for c in concs}
    keys = [(lab, BASE_STYLE if cd.is_baseline(lab) else SERVED_STYLE) for lab in series.throughput]
    throughput.border_title = _title("Output tok/s vs concurrency", *keys)
    mark = f"  [{MARK_STYLE}]│[/] crossover ≈ {series.crossover:.3g}" if series.crossover else ""
    speedup.border_title = f"Speedup vs concurrency{mark}"
    speedup.tooltip = series.verdict

    def axis(c: Chart) -> None:
        lo, hi = math.log2(concs[0]), math.log2(concs[-1])
        pad = max(0.25, (hi - lo) * 0.05)
        c.set_xlimits(lo - pad, hi + pad)
        c.set_xticks(sorted(labels))
        c.set_x_formatter(Labels(labels))
        c.set_xlabel("concurrency")
        if series.crossover:
            c.add_v_line(math.log2(series.crossover), line_style=MARK_STYLE)

    def draw_tok(c: Chart) -> None:
        for (_, style), pts in zip(keys, series.throughput.values(), strict=True):
            xs, ys = [math.log2(p[0]) for p in pts], [p[1] for p in pts]
            c.line(xs, ys, style)
            c.scatter(xs, ys, marker="●", marker_style=style)
        c.set_ylimits(0.0, None)
        axis(c)

    def draw_speedup(c: Chart) -> None:
        if series.speedup:
            xs, ys = [math.log2(p[0]) for p in series.speedup], [p[1] for p in series.speedup]
            c.line([math.log2(concs[0]), math.log2(concs[-1])], [1.0, 1.0], BASE_STYLE)
            c.line(xs, ys, SERVED_STYLE)
            c.scatter(xs, ys, marker="●", marker_style=SERVED_STYLE)
            c.set_ylimits(0.0, max(1.2, max(ys) * 1.1))
        axis(c)

    key = repr(series)
    throughput.update(key, draw_tok)
    speedup.update(key, draw_speedup)
    return True, bool(series.speedup)


def draw_watch(chart: Chart, host: HostState) -> bool:
    """`bench watch`: the acceptance rate of each /metrics window, over time."""
    windows = list(host.charts.watch)
    if not windows:
        return False
    t_end = windows[-1][0]
    mean = windows[-1][2]
    chart.border_title = (f"Acceptance over time (bench watch): rate {fmt_pct(windows[-1][1])}"
                          + (f", mean length {fmt_sig(mean)}" if mean is not None else ""))

    def draw(c: Chart) -> None:
        shown = cd.thin([(t - t_end, r) for t, r, _ in windows], c.columns)
        c.line([p[0] for p in shown], [p[1] for p in shown], SERVED_STYLE)
        c.set_ylimits(0.0, 1.0)
        c.set_xlabel("seconds watched (0 = latest window)")

    chart.update((len(windows), windows[-1]), draw)
    return True


def draw_gpus(util: Chart, mem: Chart, host: HostState) -> bool:
    """Per-GPU utilisation and memory over the last minutes, one line per GPU."""
    series = cd.gpu_series(host.charts)
    if not series:
        return False
    keys = [(str(i), GPU_STYLES[n % len(GPU_STYLES)]) for n, i in enumerate(series)]
    # each GPU's number in its line's colour: eight of them fit a half-width title
    legend = "".join(f"[{style}]{name}[/]" for name, style in keys)
    util.border_title = f"GPU util % · GPUs {legend}"
    mem.border_title = f"GPU memory % · GPUs {legend}"
    oldest = min(points[0][0] for points in series.values())

    def draw(which: int) -> Callable[[Chart], None]:
        def fn(c: Chart) -> None:
            for (_, style), points in zip(keys, series.values(), strict=True):
                shown = cd.thin(points, c.columns)
                c.line([p[0] for p in shown], [p[which] for p in shown], style)
            c.set_ylimits(0.0, 100.0)
            c.set_xlimits(min(oldest, -10.0), 0.0)  # up to GPU_WINDOW_S back
            c.set_xlabel("seconds (0 = latest sample)")
        return fn

    version = host.charts.gpu_version
    util.update(version, draw(1))
    mem.update(version, draw(2))
    return True


class ChartRow(Horizontal):
    """Charts side by side (two on a row: each keeps ~38 columns at 80)."""

    DEFAULT_CSS = "ChartRow { height: auto; } ChartRow > Chart { width: 1fr; }"
