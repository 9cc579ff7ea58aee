"""A bench matrix seen, not read: its bench.matrix events (as a live matrix publishes them, here
from a result file read back by publish_found) folded by the TUI's reducers into the Bench
screen's matrix panel (speedup per draft and K, per temperature and concurrency, and the
recommendation lines), and into the HTML report's chart; a running matrix shows its progress
and ETA; the `M` key asks for `console bench matrix` options and refuses bad ones in one line."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from console.report.page import render
from console.tui.widgets.bench import matrix_panel
from remote.ops.matrix import publish_found
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests.remote.bench.test_bench_matrix import _filled, _plan
from tests.tui_helpers import SIZE, finish_replay, local_app, plain, refused_options, replay_app, settle
from tests.tui_sessions import HOST, Clock, write_session

SPEEDS = {("ngram", 1): 0.8, ("ngram", 3): 0.9, ("pipeline", 1): 1.2, ("pipeline", 3): 1.4}


def _matrix_session(path: Path, *, running: bool = False) -> tuple[Path, list[str]]:
    m = _filled(_plan(), SPEEDS)
    bad = m.cells[("pipeline", 1, 0.7, 4)].rounds[0]
    bad.failed, bad.errors = 1, ["HTTP 500: boom"]
    m.host = HOST
    m.path = path.with_suffix(".json")
    m.time_split = {"wall": 100.0, "engine_start": 70.0, "warmup": 5.0, "measured": 20.0,
                    "rest": 5.0}
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)
    publish_found(bus, m)
    c = Clock()
    events = [Event.checked(e.kind, e.host, e.payload, c.tick(1)) for e in seen]
    if running:  # a matrix still going: its plan, then the cells so far with their ETA
        events = [Event.checked(ev.BENCH_MATRIX, HOST, {
            "phase": "plan", "summary": "measuring 24 cells", "total": 24, "eta_s": 600.0,
            "result_file": str(m.path)}, c.tick(1))] + [
            Event.checked(ev.BENCH_MATRIX, HOST, {**e.payload, "found": False, "done": i + 1,
                                                  "total": 24, "eta_s": 300.0}, c.tick(1))
            for i, e in enumerate(events[:5])]
    return write_session(path, events), m.recommendations()


async def test_bench_screen_shows_the_matrix_and_the_recommendation(tmp_path: Path) -> None:
    path, recs = _matrix_session(tmp_path / "m.jsonl")
    app = replay_app(path, start_screen="bench")
    async with app.run_test(size=(140, 50)) as pilot:
        await finish_replay(pilot)
        await settle(pilot)
        host = app.state.host(HOST)
        text = plain(app.screen.query_one("#matrix", Static), 140)
        assert "Matrix: speedup over no speculation" in text
        for name in ("n-gram K=1", "n-gram K=3", "eagle3 K=1", "eagle3 K=3"):
            assert name in text
        assert "T=0.7 c=4" in text and "1.40x" in text and "0.80x" in text
        assert recs and all(line in text for line in recs)
        assert "the rest 5%" in text
        assert [ln.strip() for ln in text.splitlines() if "failed" in ln] == [
            "failed requests: eagle3 K=1 T=0.7 c=4: 1 of 4"]
        assert "Matrix running" not in text and host.matrix.get("finished")


async def test_a_running_matrix_shows_progress_and_eta(tmp_path: Path) -> None:
    path, _ = _matrix_session(tmp_path / "run.jsonl", running=True)
    app = replay_app(path, start_screen="bench")
    async with app.run_test(size=SIZE) as pilot:
        await finish_replay(pilot)
        await settle(pilot)
        text = str(matrix_panel(app.state.host(HOST)).renderables[0])  # type: ignore[union-attr]
        assert text == "Matrix running: 5/24 cells, ETA 5.0 min"


def test_report_draws_the_matrix(tmp_path: Path) -> None:
    path, recs = _matrix_session(tmp_path / "m.jsonl")
    page = render(path)
    assert "<h3>Speculation matrix</h3>" in page
    start = page.index("<h3>Speculation matrix</h3>")
    assert "data:image/png;base64," in page[start:start + 400]
    assert all(f"<p><b>{line}</b></p>" in page for line in recs)


async def test_matrix_key_refuses_bad_options_in_one_line(tmp_path: Path) -> None:
    app = local_app(tmp_path / "box", "bench")
    async with app.run_test(size=SIZE) as pilot:
        message = await refused_options(app, pilot, "M", "--drafts", "--demo --k 1,x", "matrix failed")
        assert "--k" in message and "\n" not in message
        assert app.matrix_options["local"] == "--demo --k 1,x"
        assert not app.state.host("local").matrix_cells
        await app.source.controller.aclose()
