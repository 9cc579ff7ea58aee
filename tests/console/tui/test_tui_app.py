"""Pilot tests: each screen's main flows, driven by a replayed session file (written with the
real SessionWriter) or by a live source whose controller is a scripted test double."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Static, Tree

from console.tui.app import ConsoleApp
from console.tui.dialogs import AskScreen, ConfirmScreen, HelpScreen, SeekScreen
from console.tui.widgets.common import TopBar
from console.tui.widgets.log_view import LogView
from console.tui.widgets.tab_bar import TabBar
from remote.errors import RemoteError
from remote.ops import probes as probe_ops
from tests.tui_helpers import (
    SIZE,
    ScriptedController,
    live_app,
    live_started,
    local_app,
    over_detached_job,
    plain,
    replay_app,
    replayed,
    settle,
    wait_for,
)
from tests.tui_sessions import HOST, WORKER, demo_session


@pytest.fixture
def session(tmp_path: Path) -> Path:
    return demo_session(tmp_path / "demo.jsonl")


def tree_labels(tree: Tree) -> list[str]:  # type: ignore[type-arg]
    out: list[str] = []

    def walk(node) -> None:  # type: ignore[no-untyped-def]
        out.append(str(node.label))
        for child in node.children:
            walk(child)

    walk(tree.root)
    return out


async def test_hosts_screen_lists_hosts_and_selecting_switches_host(session: Path) -> None:
    async with replayed(session, start_screen="hosts") as (app, pilot):
        table = app.query_one("#hosts-table", DataTable)
        assert table.row_count == 1
        row = table.get_row_at(0)
        assert str(row[0]) == HOST and "torch 2.9.0" in row[3] and "2 GPUs" in row[3]
        await pilot.press("enter")
        await pilot.pause()
        assert app.current_host == HOST and "host: gpu-box" in app.notices


async def test_hosts_connect_local_for_real_and_badge_goes_live() -> None:
    """The real LiveController against the built-in local host (LocalTransport)."""
    app = live_app(hosts=["local"], scripted=False)
    async with app.run_test(size=SIZE) as pilot:
        assert "not connected" in plain(app.query_one(TopBar))
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.host("local").connection == "live")
        await settle(pilot)
        assert "● live" in plain(app.query_one(TopBar))
        assert "live" in str(app.query_one("#hosts-table", DataTable).get_row_at(0)[2])
        await app.source.controller.aclose()


async def test_a_failing_action_says_so_and_the_console_runs_on(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refused(*_: object) -> None:
        raise RemoteError("the box refused the probe")

    monkeypatch.setattr(probe_ops, "run", refused)
    app = live_app(hosts=["local"], scripted=False, start_screen="probes")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await wait_for(pilot, lambda: bool(app.notices))
        assert "the box refused the probe" in app.notices[-1]
        assert app.notice_log[-1][:2] == ("env probe failed", "error")
        assert app.is_running  # nothing crashed
        await app.source.controller.aclose()


async def test_overview_shows_gpus_load_jobs_and_findings(session: Path) -> None:
    async with replayed(session, start_screen="overview") as (app, _):
        gpus = plain(app.query_one("#gpus", Static))
        assert "GPUs (2)" in gpus and "0 H200" in gpus and "▁" in gpus
        assert "python3" in gpus and "84G" in gpus  # the process holding GPU memory, under its GPU
        assert "load 3.00" in plain(app.query_one("#hostline", Static))
        jobs = plain(app.query_one("#jobs", Static))
        assert "r-extract" in jobs and "r-prepare" not in jobs  # only running jobs
        assert "tokenizer loaded without trust_remote_code" in plain(app.query_one("#findings", Static))


async def test_probes_screen_tree_marks_and_findings_live() -> None:
    app = live_app(start_screen="probes")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, AskScreen)  # which model: asked once, remembered per host
        await pilot.press(*"/models/kimi", "enter")
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, AskScreen) and app.screen.query_one(Input).value == "/models/kimi"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "compat" in app.state.host(HOST).probes)
        await settle(pilot)
        labels = tree_labels(app.query_one("#model-tree", Tree))
        assert labels[0].startswith("KimiK25ForConditionalGeneration") and "✗ no SupportsEagle3" in labels[0]
        assert any("language_model: DeepseekV2ForCausalLM" in x for x in labels)
        assert any("model: DeepseekV2Model" in x for x in labels)
        assert any("layers — layers path language_model.model.layers (61 layers)" in x for x in labels)
        assert "worker patch: resolve layers path" in plain(app.query_one("#compat", Static))
        assert [c[2] for c in app.source.controller.calls] == ["model", "compat"]  # type: ignore[attr-defined]


async def test_patch_plan_apply_needs_confirmation_verify_rollback() -> None:
    app = live_app(start_screen="patch")
    async with app.run_test(size=SIZE) as pilot:
        ctrl = app.source.controller
        assert isinstance(ctrl, ScriptedController)
        await pilot.press("a")  # nothing planned yet
        await wait_for(pilot, lambda: "plan a patch first (p)" in app.notices)
        await pilot.press("p")
        await wait_for(pilot, lambda: WORKER in app.state.host(HOST).patches)
        await settle(pilot)
        assert "+        layers = _resolve_layers(model)" in plain(app.query_one("#diff", Static))
        recipes = plain(app.query_one("#recipes", Static))
        assert "✓ resolve-layers-path" in recipes and "✗ scheduler-is-encoder-decoder  already present" in recipes
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and WORKER in app.screen.question
        await pilot.press("n")
        await pilot.pause()
        assert ("apply", HOST, WORKER) not in ctrl.calls
        await pilot.press("a", "y")
        await wait_for(pilot, lambda: app.state.host(HOST).patches[WORKER].status == "applied")
        await pilot.press("v")
        await wait_for(pilot, lambda: app.state.host(HOST).patches[WORKER].status == "verified")
        await pilot.press("r", "y")
        await wait_for(pilot, lambda: app.state.host(HOST).patches[WORKER].status == "rolled_back")
        await settle(pilot)
        assert [c[0] for c in ctrl.calls] == ["plan", "apply", "verify", "rollback"]
        assert "rolled_back" in str(app.query_one("#patch-files", DataTable).get_row_at(0)[1])


async def test_pipeline_stages_progress_and_log_tail_of_selected_stage(session: Path) -> None:
    async with replayed(session, start_screen="pipeline") as (app, pilot):
        table = app.query_one("#stages", DataTable)
        rows = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        # one row per stage, its runs under it; the stages not run yet are listed pending
        assert rows == ["prepare", " └ r-prepare", "extract", " └ r-extract", "vocab", "train", "evaluate"]
        assert "30.0%" in str(table.get_row_at(2)[2]) and "850 tok/s" in str(table.get_row_at(2)[3])  # 3 digits
        assert str(table.get_row_at(4)[1]) == "pending"
        log = app.query_one(LogView)
        assert log.tail is not None and log.tail.line(0) == "extract: batch 0"  # running stage followed
        table.focus()
        await pilot.press("up", "up")
        await settle(pilot)
        assert log.tail is not None and log.tail.total == 40
        # only visible lines are rendered, and following shows the last ones
        visible = [log.render_line(y).text.rstrip() for y in range(log.scrollable_content_region.height)]
        assert visible[-1] == "prepare: tokenized conversation 39 (loss-mask tokens 139)"
        assert "prepared.jsonl" in plain(app.query_one("#artifacts", Static))


async def test_pipeline_start_and_cancel_with_confirmation() -> None:
    app = live_app(start_screen="pipeline")
    async with app.run_test(size=SIZE) as pilot:
        ctrl = app.source.controller
        assert isinstance(ctrl, ScriptedController)
        await pilot.press("s")
        await wait_for(pilot, lambda: "prepare" in app.state.host(HOST).stages)
        await settle(pilot)
        log = app.query_one(LogView)
        assert log.tail is not None and log.tail.line(2) == "prepare line 2"
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: app.state.host(HOST).stages["prepare"].status == "failed")
        assert ctrl.calls == [("start", HOST, "prepare"), ("cancel", HOST, "prepare")]


async def test_stats_and_allreduce_screen(session: Path) -> None:
    async with replayed(session, start_screen="stats") as (app, pilot):
        sweep = plain(app.query_one("#sweep", Static))
        assert "AllReduce bus bandwidth" in sweep and "64.0 MiB" in sweep and "█" in sweep
        trace = plain(app.query_one("#trace", Static))
        assert "ncclDevKernel_AllReduce" in trace and "0.52" in trace
        history = plain(app.query_one("#history", Static))
        assert "GPU history" in history and "65°C" in history and "▁" in history
        drawn = [app.query_one(f"#{w}", Static).content for w in ("sweep", "trace")]
        await pilot.press("2")
        await pilot.press("6")
        await settle(pilot)
        assert app.active_screen_name == "stats"  # shown again, same results: not drawn anew
        assert [app.query_one(f"#{w}", Static).content for w in ("sweep", "trace")] == drawn
        assert "64.0 MiB" in plain(app.query_one("#sweep", Static))


async def test_bench_screen_table_acceptance_and_speedup(session: Path) -> None:
    async with replayed(session, start_screen="bench") as (app, _):
        assert "eagle3" in plain(app.query_one("#sweep-table", Static))
        acc = plain(app.query_one("#acceptance", Static))
        assert "81.0%" in acc and "44.0%" in acc  # rates as percentages
        speed = plain(app.query_one("#speedup", Static))
        assert "1.97x" in speed and "1.50x" in speed  # 2 - 16/32 at concurrency 16


async def test_replay_pause_step_speed_markers_and_seek(session: Path) -> None:
    app = replay_app(session, speed=1.0, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        r = app.replayer
        assert r.paused and r.position == 0
        await pilot.press("full_stop")
        await settle(pilot)
        assert r.position == 1 and app.state.host(HOST).connection == "live"
        await pilot.press("greater_than_sign")
        assert r.speed == 10.0
        await pilot.press("greater_than_sign")
        assert r.speed == float("inf")
        await pilot.press("greater_than_sign")
        assert r.speed == 1.0
        # next marker: patch.applied; state is rebuilt up to and including it
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert app.state.host(HOST).patches[WORKER].status == "applied"
        assert app.state.host(HOST).stages == {}
        first = r.position
        await pilot.press("right_square_bracket")
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert r.position > first and app.state.host(HOST).stages["prepare"].status == "running"
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert app.state.host(HOST).stages == {}  # back before stage.start
        # seek by time: 20 s after the first event lands mid-"prepare"
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, SeekScreen)
        app.screen.query_one(Input).value = "+17"
        await pilot.press("enter")
        await settle(pilot)
        h = app.state.host(HOST)
        assert h.stages["prepare"].status == "running" and 0 < len(h.jobs["r-prepare"].tail) < 40
        await pilot.press("0")
        await settle(pilot)
        assert r.position == 0 and app.state.host(HOST).connection == "unknown"
        assert "paused" in plain(app.query_one("#replay-status", Static))
        await pilot.press("space")
        assert not r.paused


async def test_replay_marker_table_enter_seeks(session: Path) -> None:
    app = replay_app(session, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#markers", DataTable)
        assert [str(table.get_row_at(i)[2]) for i in range(3)] == ["patch.applied", "marker", "stage.start"]
        table.focus()
        await pilot.press("down", "down", "enter")
        await settle(pilot)
        assert app.state.host(HOST).stages["prepare"].status == "running"


async def test_bad_seek_input_is_a_message_not_a_crash(session: Path) -> None:
    app = replay_app(session, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("t")
        await pilot.pause()
        app.screen.query_one(Input).value = "yesterday"
        await pilot.press("enter")
        await pilot.pause()
        assert "not a time: 'yesterday'" in app.notices[-1] and app.replayer.position == 0


async def test_reconnecting_badge_and_disconnected_state(tmp_path: Path) -> None:
    async with replayed(demo_session(tmp_path / "s.jsonl", reconnecting=True), start_screen="overview") as (app, _):
        bar = plain(app.query_one(TopBar))
        assert "reconnecting (attempt 2, in 4s)" in bar and "Connection refused" in bar and "replay" in bar


async def test_live_actions_are_not_bound_in_replay(session: Path) -> None:
    app = replay_app(session, paused=True, start_screen="patch")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a", "p", "s")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and app.replayer.position == 0


async def test_screen_keys_only_work_on_their_screen() -> None:
    async with live_started(start_screen="overview") as (app, pilot):
        await pilot.press("p")  # patch.plan belongs to the Patch screen
        await pilot.pause(0.1)
        assert app.source.controller.calls == []  # type: ignore[attr-defined]
        await pilot.press("4", "p")
        await wait_for(pilot, lambda: bool(app.source.controller.calls))  # type: ignore[attr-defined]


async def test_help_screen_and_palette_come_from_the_registry() -> None:
    app = live_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = plain(app.screen.query_one("#help-table", Static), width=160)
        assert "patch.apply" in text and "Apply the planned patch" in text and "replay.seek" not in text
        await pilot.press("escape")
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"rollback")
        await pilot.pause(0.3)
        from textual.command import CommandList, CommandPalette

        assert isinstance(app.screen, CommandPalette)
        options = app.screen.query_one(CommandList)
        await wait_for(pilot, lambda: options.option_count > 0)
        first = str(options.get_option_at_index(0).prompt)
        assert "Rollback (r)" in first
        await pilot.press("down", "enter")  # pick it: rollback asks first, nothing planned -> a notice
        await wait_for(pilot, lambda: "plan a patch first (p)" in app.notices)


def test_entry_points_keep_their_signatures() -> None:
    import inspect

    from console.tui import launch as app_module  # the entry points, moved out of app.py

    assert list(inspect.signature(app_module.run_app).parameters) == ["args"]
    assert list(inspect.signature(app_module.run_replay_app).parameters) == ["reader"]
    assert issubclass(app_module.HostsApp, ConsoleApp)


async def test_plan_with_the_real_patcher_on_the_local_host(tmp_path: Path) -> None:
    """Read-only: plans against the speculators installed in this venv (never applies here)."""
    import sys

    from console.tui.controller import LiveSource
    from remote.link.hosts import Config, HostConfig

    hc = HostConfig(name="local", python=sys.executable, workdir=str(tmp_path / "box"))
    app = ConsoleApp(LiveSource(Config(hosts={"local": hc}, path=None)), start_screen="patch")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await wait_for(pilot, lambda: len(app.state.host("local").patches) >= 2, timeout=60)
        await settle(pilot)
        table = app.query_one("#patch-files", DataTable)
        files = {str(table.get_row_at(i)[0]) for i in range(table.row_count)}
        assert "speculators/data_generation/custom_worker.py" in files
        assert "+++ b/data_generation/" in plain(app.query_one("#diff", Static))
        assert "✓ " in plain(app.query_one("#recipes", Static))
        await app.source.controller.aclose()


async def test_connect_reattaches_running_jobs_tails_and_cancels_them(tmp_path: Path) -> None:
    """Real detached job on the local host (remote.jobs.client): the console connects, shows the run with
    its log, and cancels it after confirmation."""
    argv = ["sh", "-c", "for i in 1 2 3; do echo line $i; done; exec sleep 60"]
    async with over_detached_job(tmp_path / "box", argv, "train", "pipeline") as (app, pilot, run_id):
        await pilot.press("1", "c", "5")
        h = app.state.host("local")
        try:
            await wait_for(pilot, lambda: run_id in h.jobs and h.jobs[run_id].tail.total >= 3, timeout=30)
        except AssertionError:
            raise AssertionError(f"{[(n.level, n.text) for n in h.notes]} {app.notices} {h.jobs}") from None
        await settle(pilot)
        log = app.query_one(LogView)
        assert log.tail is not None and [log.tail.line(i) for i in range(3)] == ["line 1", "line 2", "line 3"]
        table = app.query_one("#stages", DataTable)
        rows = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        run_time, run_hash = run_id[9:15], run_id.rsplit("-", 1)[1]
        assert rows[rows.index("train") + 1] == f" └ {run_time[:2]}:{run_time[2:4]}:{run_time[4:]} {run_hash}"
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: h.jobs[run_id].state == "cancelled", timeout=30)
        await app.source.controller.aclose()


async def test_env_probe_with_the_real_probe_runner_on_the_local_host(tmp_path: Path) -> None:
    import sys

    app = local_app(tmp_path / "box", "probes")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await wait_for(pilot, lambda: "env" in app.state.host("local").probes, timeout=60)
        await settle(pilot)
        env = plain(app.query_one("#env", Static))
        assert f"py {sys.version.split()[0]}" in env and "torch" in env
        await app.source.controller.aclose()


async def test_log_view_paging_stops_following_and_end_resumes(tmp_path: Path) -> None:
    async with replayed(demo_session(tmp_path / "s.jsonl", log_lines=400), start_screen="pipeline") as (app, pilot):
        table = app.query_one("#stages", DataTable)
        table.focus()
        await pilot.press("up", "up")  # the prepare stage: 400 lines
        await settle(pilot)
        log = app.query_one(LogView)
        height = log.scrollable_content_region.height
        assert log.render_line(height - 1).text.startswith("prepare: tokenized conversation 399")
        log.focus()
        await pilot.press("home")
        await pilot.pause()
        assert not log.follow and log.render_line(0).text.startswith("prepare: tokenized conversation 0 ")
        await pilot.press("end")
        await pilot.pause()
        assert log.follow and log.render_line(height - 1).text.startswith("prepare: tokenized conversation 399")


async def test_first_keys_are_not_undone_by_start_up_tab_activation() -> None:
    """Keys pressed before Textual has processed its own activation of the start tab."""
    for _ in range(3):
        app = live_app(start_screen="pipeline")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("1", "c")
            await wait_for(pilot, lambda: app.state.host(HOST).connection == "live")  # noqa: B023
            assert app.active_screen_name == "hosts"


async def test_a_tab_click_and_the_arrows_on_the_tab_bar_switch_screens() -> None:
    """The tab bar is one widget beside the views (no TabbedContent): a click on a tab
    shows its screen with its view focused; left/right on the focused bar move between
    screens; the view left behind keeps its state (its table cursor)."""
    async with live_started(start_screen="hosts") as (app, pilot):
        bar = app.query_one("#tabs", TabBar)
        await pilot.click("#tabs", offset=(bar.tab_offset("pipeline"), 0))
        await settle(pilot)
        assert app.active_screen_name == "pipeline"
        view = app.view("pipeline")
        assert view is not None and view.display and app.focused is view.query_one("#stages")
        hosts = app.view("hosts")
        assert hosts is not None and not hosts.display  # hidden, still mounted
        app.query_one("#stages", DataTable).move_cursor(row=2)
        app.query_one("#tabs").focus()
        await pilot.press("right")
        await settle(pilot)
        assert app.active_screen_name == "stats" and not view.display
        app.query_one("#tabs").focus()
        await pilot.press("left")
        await settle(pilot)
        assert app.active_screen_name == "pipeline" and view.display
        assert app.query_one("#stages", DataTable).cursor_row == 2
