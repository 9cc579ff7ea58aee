"""The TUI's charts: each one with data, live (events published on the live source's bus, as a
box's would be) and from a replay of the same events, drawing the same thing; the series folded
from events (console/tui/chart_data.py); and a chart redrawn only when shown and changed.
Snapshots (pytest-textual-snapshot): each chart screen live and replayed, looked at by a human."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual_hires_canvas import Canvas

from console.tui import chart_data as cd
from console.tui.app import ConsoleApp
from console.tui.model import ConsoleState
from console.tui.widgets.charts import Chart
from remote.spine import events as ev
from remote.spine.events import Event
from tests.chart_sessions import CONCURRENCIES, chart_events, chart_session
from tests.tui_helpers import HOST, finish_replay, live_app, replay_app, replayed, settle
from tests.tui_sessions import stats_payload

SnapCompare = Callable[..., bool]
SCREEN_CHARTS = {"pipeline": ["chart-loss"],
                 "bench": ["chart-watch", "chart-acceptance", "chart-throughput", "chart-speedup"],
                 "stats": ["chart-gpu-util", "chart-gpu-mem"]}
CHART_SIZE = (120, 40)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chart_session(tmp_path_factory.mktemp("charts") / "charts.jsonl")


def live_with_events(start_screen: str) -> ConsoleApp:
    """The live app; its events are published by `publish_all` once it runs."""
    return live_app(start_screen=start_screen, hosts=[HOST])


async def publish_all(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    for e in chart_events():
        app.source.bus.publish(e)
    await settle(pilot)


def plot_text(chart: Chart) -> str:
    """What the chart's plot area shows, as text (braille and block characters)."""
    canvas = chart.query_one("#plot", Canvas)
    return "\n".join(canvas.render_line(y).text for y in range(canvas.size.height))


def drawn(text: str) -> int:
    """Cells with something plotted: braille dots (lines) and block characters (bars)."""
    return sum(1 for ch in text if 0x2801 <= ord(ch) <= 0x28FF or ch in "█▀▄▌▐▖▗▘▙▚▛▜▝▞▟")


# -- the series -------------------------------------------------------------------------------------

def test_series_folded_from_events() -> None:
    state = ConsoleState([HOST])
    state.apply_all(chart_events())
    charts = state.host(HOST).charts
    assert [s for s, _ in charts.loss] == list(range(1, 121))  # every step, none thinned yet
    assert len(charts.watch) == 30 and all(0.0 <= r <= 1.0 for _, r, _ in charts.watch)
    series = cd.gpu_series(charts)
    assert sorted(series) == list(range(8))
    # 5 samples a second for 90 s: one point per second (the first and the open one partial)
    assert 89 <= len(series[0]) <= 92
    assert series[0][-1][0] == 0.0 and series[0][0][0] == pytest.approx(-len(series[0]) + 1, abs=1)
    conc = cd.concurrency_series(state.host(HOST).bench_points)
    assert [c for c, _ in conc.speedup] == list(CONCURRENCIES)
    assert conc.crossover is not None and 32 < conc.crossover < 64
    assert "pays up to 32, not at 64" in conc.verdict


def test_gpu_buckets_and_loss_thinning() -> None:
    data = cd.ChartData()
    t0 = chart_events()[0].ts
    samples = [Event.checked(ev.STATS_SAMPLE, HOST, stats_payload(i, 1), t0 + timedelta(seconds=i * 0.25))
               for i in range(8)]
    for s in samples:
        s.payload["gpus"][0]["util"] = 10.0 * (samples.index(s) + 1)
    versions = []
    for s in samples:
        cd.fold(data, s)
        versions.append(data.gpu_version)
    assert versions == [1, 1, 1, 1, 2, 2, 2, 2]  # a redraw per second, not per sample
    assert [round(u) for _, u, _ in cd.gpu_series(data)[0]] == [25, 65]  # means of each second
    # Past the window, the oldest buckets go.
    late = Event.checked(ev.STATS_SAMPLE, HOST, stats_payload(0, 1), t0 + timedelta(seconds=cd.GPU_WINDOW_S + 5))
    cd.fold(data, late)
    assert [p[0] for p in cd.gpu_series(data)[0]] == [0.0]
    loss = cd.ChartData()
    for step in range(1, 3000):
        cd.fold(loss, Event.checked(ev.STAGE_PROGRESS, HOST, {"stage": "train", "done": step, "loss": 1.0 / step}))
    assert len(loss.loss) <= cd.LOSS_POINTS and loss.loss[0][0] == 1 and loss.loss[-1][0] > 2900
    steps = [s for s, _ in loss.loss]
    assert steps == sorted(steps) and len({b - a for a, b in itertools.pairwise(steps)}) == 1


# -- every chart drawn, live and replayed, the same ---------------------------------------------------

async def _chart_texts(app: ConsoleApp, pilot: Pilot[Any], screen: str) -> dict[str, str]:
    if app.active_screen_name != screen:
        app.action_show(screen)
    await settle(pilot)
    await pilot.pause(0.1)
    texts = {}
    for chart_id in SCREEN_CHARTS[screen]:
        chart = app.query_one(f"#{chart_id}", Chart)
        chart.scroll_visible(animate=False, immediate=True)  # below the fold: painted once seen
        await pilot.pause(0.1)
        assert chart.display and chart.region.height > 3, chart_id
        assert chart.draws >= 1, chart_id
        texts[chart_id] = plot_text(chart)
        assert drawn(texts[chart_id]) > 5, (chart_id, texts[chart_id])
    return texts


async def test_each_chart_drawn_live_and_in_replay_alike(session: Path) -> None:
    from_replay: dict[str, str] = {}
    async with replayed(session, start_screen="pipeline", size=CHART_SIZE) as (app, pilot):
        for screen in SCREEN_CHARTS:
            from_replay |= await _chart_texts(app, pilot, screen)
        assert not app.errors
    live: dict[str, str] = {}
    app = live_with_events("pipeline")
    async with app.run_test(size=CHART_SIZE) as pilot:
        await publish_all(pilot)
        for screen in SCREEN_CHARTS:
            live |= await _chart_texts(app, pilot, screen)
        assert not app.errors
    assert live == from_replay  # the charts cannot tell a live box from its replay


async def test_a_chart_redraws_only_when_shown_and_changed() -> None:
    app = live_with_events("stats")
    async with app.run_test(size=CHART_SIZE) as pilot:
        await publish_all(pilot)
        util = app.query_one("#chart-gpu-util", Chart)
        base = util.draws  # the stream is folded over a few frames, each refresh a draw at most
        assert base >= 1
        last = app.state.host(HOST).last_event
        assert last is not None

        def sample(dt: float) -> None:
            at = last + timedelta(seconds=dt)
            app.source.bus.publish(Event.checked(ev.STATS_SAMPLE, HOST, stats_payload(1, 8), at))

        app.action_show("hosts")
        await settle(pilot)
        app.action_show("stats")
        await settle(pilot)
        assert util.draws == base  # shown again, nothing new: not redrawn
        sample(0.01)  # the same second: the open point moves, no redraw
        await settle(pilot)
        assert util.draws == base
        sample(1.0)  # a new second: one redraw
        await settle(pilot)
        assert util.draws == base + 1
        app.action_show("hosts")
        await settle(pilot)
        for k in range(2, 6):  # hidden: folded, never drawn
            sample(float(k))
        await settle(pilot)
        assert util.draws == base + 1
        app.action_show("stats")
        await settle(pilot)
        assert util.draws == base + 2  # shown: drawn once with all of it


# -- snapshots -----------------------------------------------------------------------------------------
# (screen, the chart scrolled to the top: the Bench screen's charts are below its tables)
SNAPSHOTS = {"pipeline": None, "bench": "#chart-watch", "bench-sweep": "#chart-concurrency", "stats": "#chart-gpus"}


async def _scrolled(pilot: Pilot[Any], target: str | None) -> None:
    if target is not None:
        pilot.app.query_one(target).scroll_visible(animate=False, top=True, immediate=True)
    await pilot.pause(0.1)
    await settle(pilot)


@pytest.mark.parametrize("name", list(SNAPSHOTS))
def test_chart_replay_snapshot(snap_compare: SnapCompare, session: Path, name: str) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await finish_replay(pilot)
        await _scrolled(pilot, SNAPSHOTS[name])

    app = replay_app(session, start_screen=name.split("-")[0])
    assert snap_compare(app, terminal_size=CHART_SIZE, run_before=run_before)


@pytest.mark.parametrize("name", list(SNAPSHOTS))
def test_chart_live_snapshot(snap_compare: SnapCompare, name: str) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await publish_all(pilot)
        await _scrolled(pilot, SNAPSHOTS[name])

    assert snap_compare(live_with_events(name.split("-")[0]), terminal_size=CHART_SIZE, run_before=run_before)



def test_a_resumed_training_continues_its_loss_curve() -> None:
    """Issue 51: a train killed after its checkpoint at step 4 and resumed there keeps the curve
    up to step 4 and goes on from it (the killed run's steps past 4 are done again, so they
    go); a run that starts over is a new curve."""
    data = cd.ChartData()

    def run(steps: range, **extra: object) -> None:
        cd.fold(data, Event.checked(ev.STAGE_START, HOST, {"stage": "train"}))
        for step in steps:
            cd.fold(data, Event.checked(ev.STAGE_PROGRESS, HOST,
                                        {"stage": "train", "done": step, "loss": 1.0 / step,
                                         **extra}))

    run(range(1, 7))  # killed after step 6, its checkpoint at step 4
    run(range(5, 11), resumed_from=4)
    assert [s for s, _ in data.loss] == list(range(1, 11))
    run(range(1, 4))  # --force: from step 0 again
    assert [s for s, _ in data.loss] == [1, 2, 3]
