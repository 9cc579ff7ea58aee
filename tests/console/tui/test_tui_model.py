"""The TUI's Textual-free layers: reducers, the log tail engine, the command registry and the
controller. These run without a terminal."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from console.errors import ReadOnlyReplay
from console.sessions.reader import SessionReader
from console.tui import controller as ctl
from console.tui.model import HISTORY, LOG, STAGES, STATS, ConsoleState
from console.tui.registry import COMMANDS, commands_for
from console.tui.render import bar, hbar, spark
from console.tui.tail import LogTail
from remote.link.hosts import Config
from remote.ops import probes as probe_ops
from remote.ops import stats as stats_ops
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests import tui_features
from tests.tui_sessions import COMPAT_RESULT, HOST, WORKER, demo_events, demo_session, stats_payload


def fold(events: list[Event]) -> ConsoleState:
    state = ConsoleState([HOST])
    state.apply_all(events)
    return state


def test_demo_session_folds_into_every_domain() -> None:
    h = fold(demo_events()).host(HOST)
    assert h.connection == "live"
    assert sorted(h.gpus) == [0, 1] and len(h.gpus[0].util) == 16
    assert h.probes["model"]["layers_path"] == "language_model.model.layers"
    assert [f["severity"] for f in h.compat_findings()] == ["error", "warning", "info"]
    assert h.patches[WORKER].status == "verified" and h.patches[WORKER].sha256 == "ab" * 32
    assert [s.name for s in h.ordered_stages()] == ["prepare", "extract"]
    prepare, extract = h.stages["prepare"], h.stages["extract"]
    assert prepare.status == "done" and prepare.fraction == 1.0 and prepare.seconds == 2.5
    assert extract.status == "running" and extract.fraction == pytest.approx(0.3) and extract.rate == 850.5
    job = h.job_for_stage("prepare")
    assert job is not None and job.state == "exited" and job.returncode == 0 and len(job.tail) == 40
    assert job.tail.line(0).startswith("prepare: tokenized conversation 0")
    assert job.tail.offset == sum(len(f"prepare: tokenized conversation {i} (loss-mask tokens {100 + i})") + 1
                                  for i in range(40))
    assert [j.run_id for j in h.running_jobs()] == ["r-extract"]
    assert len(h.bench_points) == 6 and h.bench_summary["summary"].startswith("eagle3")
    assert h.allreduce["sweep"][0]["busbw"] == pytest.approx(17.5e9)


def test_connection_states_down_and_reconnecting() -> None:
    state = fold(demo_events(reconnecting=True))
    h = state.host(HOST)
    assert (h.connection, h.attempt, h.retry_delay, h.connection_error) == (
        "reconnecting", 2, 4.0, "Connection refused")
    changed = state.apply(Event(ev.CONNECTION_UP, HOST, {}))
    assert changed == {"connection"} and h.connection == "live" and h.attempt is None


def test_reducers_report_only_the_domains_they_touch() -> None:
    state = ConsoleState()
    assert state.apply(Event(ev.STATS_SAMPLE, HOST, stats_payload(0))) == {STATS}
    assert state.apply(Event(ev.JOB_LINE, HOST, {"run_id": "r", "name": "x", "text": "hi", "offset": 3})) == {LOG}
    assert state.apply(Event(ev.STAGE_SKIPPED, HOST, {"stage": "vocab", "reason": "manifest matches"})) == {STAGES}
    assert state.host(HOST).stages["vocab"].status == "skipped"
    assert state.apply(Event("some.unknown.kind", HOST, {})) == set()


def test_gpu_history_is_bounded() -> None:
    state = ConsoleState()
    for i in range(HISTORY + 50):
        state.apply(Event(ev.STATS_SAMPLE, HOST, stats_payload(i, gpus=1)))
    g = state.host(HOST).gpus[0]
    assert len(g.util) == HISTORY and len(g.power) == HISTORY
    assert g.util[-1] == float(((HISTORY + 49) * 13) % 100)


def test_malformed_payload_becomes_a_note_not_an_exception() -> None:
    state = ConsoleState()
    changed = state.apply(Event(ev.STATS_SAMPLE, HOST, {"gpus": 5, "host": "nope"}))
    h = state.host(HOST)
    assert changed == {"notes"} and "malformed stats.sample" in h.notes[-1].text
    # a payload its kind's schema refuses is skipped with a note, not folded half-way
    state.apply(Event(ev.STAGE_PROGRESS, HOST, {"stage": "train", "done": 3, "total": 10}))
    changed = state.apply(Event(ev.STAGE_PROGRESS, HOST, {"stage": "train", "done": "many",
                                                          "total": None}))
    assert changed == {"notes"} and "malformed stage.progress" in h.notes[-1].text
    assert (h.stages["train"].done, h.stages["train"].total) == (3.0, 10.0)
    state.apply(Event(ev.PROBE_RESULT, HOST, {"probe": "compat", "result": {"findings": "not a list"}}))
    assert h.compat_findings() == []


def test_probe_error_then_success_clears_the_error() -> None:
    state = ConsoleState()
    state.apply(Event(ev.PROBE_ERROR, HOST, {"probe": "compat", "message": "killed"}))
    assert state.host(HOST).probe_errors == {"compat": "killed"}
    state.apply(Event(ev.PROBE_RESULT, HOST, {"probe": "compat", "result": COMPAT_RESULT}))
    assert state.host(HOST).probe_errors == {}


def test_hostless_notes_and_markers_stay_session_wide() -> None:
    state = ConsoleState()
    state.apply(Event(ev.CONSOLE_WARNING, "", {"message": "recording stopped"}))
    state.apply(Event(ev.MARKER, "", {"label": "here"}))
    assert state.hosts == {} and state.notes[-1].text == "recording stopped"
    assert state.markers[-1][2] == "here"


def test_log_tail_window_and_bounds() -> None:
    tail = LogTail(max_lines=1000)
    for i in range(2500):
        tail.append(f"line {i}\n", offset=(i + 1) * 10)
    assert len(tail) == 1000 and tail.total == 2500 and tail.dropped == 1500 and tail.offset == 25000
    assert tail.line(0) == "line 1500"
    assert tail.window(tail.tail_start(3), 3) == ["line 2497", "line 2498", "line 2499"]
    assert tail.window(995, 10) == [f"line {i}" for i in range(2495, 2500)]
    assert tail.window(-5, 2) == ["line 1500", "line 1501"]
    with pytest.raises(ValueError):
        LogTail(0)


def test_renderers() -> None:
    assert spark([0, 50, 100], 5, 0, 100) == "  ▁▅█"
    assert spark([], 3) == "   "
    assert bar(0.5, 10) == "█████·····" and bar(None, 4) == "░░░░"
    assert hbar(1, 2, 4).startswith("██") and len(hbar(1, 2, 4)) == 4


def test_registry_ids_and_keys_are_unique_and_modes_filter() -> None:
    ids = [c.id for c in COMMANDS]
    keys = [k for c in COMMANDS for k in c.key.split(",")]
    assert len(ids) == len(set(ids)) and len(keys) == len(set(keys))
    live = {c.id for c in commands_for("live")}
    replay = {c.id for c in commands_for("replay")}
    assert "patch.apply" in live and "patch.apply" not in replay
    assert "replay.seek" in replay and "replay.seek" not in live
    assert next(c for c in COMMANDS if c.id == "stage.cancel").key == "x"


async def test_replay_controller_refuses_actions() -> None:
    with pytest.raises(ReadOnlyReplay):
        await ctl.ReplayController().start_stage(HOST, "train")


async def test_live_controller_connects_local_and_calls_its_operation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Real LocalTransport; the probe action calls remote.ops.probes.run (here a stand-in that runs
    a real command on it)."""
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)
    c = ctl.LiveController(Config(hosts={}, path=None), bus)
    await c.connect("local")
    assert seen[0].kind == ev.CONNECTION_UP
    monkeypatch.setattr(probe_ops, "run", tui_features.run_probe)
    await c.run_probe("local", "env")
    result = [e for e in seen if e.kind == ev.PROBE_RESULT][-1]
    assert result.payload["probe"] == "env" and result.payload["result"]["returncode"] == 0
    await c.aclose()
    assert c.transports == {}


async def test_live_controller_reports_a_failed_connection() -> None:
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)

    class Refusing:
        """Test double: a transport whose connect fails like an unreachable host."""

        def __init__(self, *_: object) -> None: ...

        async def connect(self) -> None:
            raise ConnectionRefusedError("connection refused")

    c = ctl.LiveController(Config(hosts={}, path=None), bus, transport_factory=Refusing)  # type: ignore[arg-type]
    with pytest.raises(ConnectionRefusedError):
        await c.connect("local")
    assert seen[-1].kind == ev.CONNECTION_DOWN and "refused" in seen[-1].payload["error"]


async def test_replay_source_publishes_the_file(tmp_path: Path) -> None:
    path = demo_session(tmp_path / "s.jsonl")
    with SessionReader(path) as reader:
        src = ctl.ReplaySource(reader, speed=float("inf"))
        got: list[Event] = []
        src.bus.add_callback(got.append)
        await asyncio.wait_for(src.run(), 10)
        assert len(got) == len(reader) and src.host_names() == [HOST]
        assert got[-1].ts - got[0].ts > timedelta(seconds=10)


async def _connected(monkeypatch: pytest.MonkeyPatch, stats: Callable[..., Awaitable[None]]
                     ) -> tuple[ctl.LiveController, list[Event]]:
    """A live controller connected to the local host with `stats` as its stats stream, and the
    events its bus carried."""
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)
    monkeypatch.setattr(stats_ops, "stream", stats)
    c = ctl.LiveController(Config(hosts={}, path=None), bus)
    await c.connect("local")
    return c, seen


async def test_connect_starts_live_stats_where_available(monkeypatch: pytest.MonkeyPatch) -> None:
    c, seen = await _connected(monkeypatch, tui_features.stream_stats)
    for _ in range(100):
        if sum(e.kind == ev.STATS_SAMPLE for e in seen) >= 3:
            break
        await asyncio.sleep(0.01)
    await c.aclose()
    n = sum(e.kind == ev.STATS_SAMPLE for e in seen)
    assert n >= 3
    await asyncio.sleep(0.05)
    assert sum(e.kind == ev.STATS_SAMPLE for e in seen) == n  # cancelled on close


async def test_a_stats_stream_that_fails_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async def failing(*_: object, **__: object) -> None:
        raise ConnectionError("no sampler on this box")

    c, seen = await _connected(monkeypatch, failing)
    for _ in range(100):
        if any(e.kind == ev.CONSOLE_ERROR for e in seen):
            break
        await asyncio.sleep(0.01)
    await c.aclose()
    said = [e.payload["message"] for e in seen if e.kind == ev.CONSOLE_ERROR]
    assert said == ["live stats stopped: no sampler on this box"]


def test_state_layers_do_not_import_textual() -> None:
    """model/tail/controller/registry/render are the Textual-free layers the lead can reuse."""
    import subprocess
    import sys

    code = ("import sys; import console.tui.model, console.tui.tail, console.tui.controller, "
            "console.tui.registry, console.tui.render; print('textual' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "False"


def test_bench_watch_windows_and_positions_without_drafts() -> None:
    from rich.console import Console

    from console.tui.widgets.bench import acceptance_chart, windows_table

    state = ConsoleState()
    for i in range(3):
        state.apply(Event("bench.watch", HOST, {"window": i, "seconds": 5.0, "accepted_tok_s": 100.0 + i,
                                                "acceptance": {"rate": 0.5 + i / 10, "mean_length": 2.0,
                                                               "per_position": [0.8, None]}}))
    h = state.host(HOST)
    assert len(h.bench_watch) == 3
    console = Console(width=100, color_system=None)
    with console.capture() as cap:
        console.print(windows_table(list(h.bench_watch)))
    last = cap.get().splitlines()[-1].split()  # the latest window: its number, length, tok/s
    assert last[0] == "2" and "2.00" in last and last[-1] == "102"
    point = {"label": "speculative", "concurrency": 1, "acceptance": {"per_position": [0.8, None]}}
    with console.capture() as cap:
        console.print(acceptance_chart([point]))
    assert "80.0%" in cap.get() and "-" in cap.get()
