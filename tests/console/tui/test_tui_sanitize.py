"""Issue 18 item 6 in the TUI: box text is drawn, never obeyed.

A hostile (or broken) box puts terminal sequences and Rich markup in what the TUI shows: a
probe result's class names and reason, a patch diff, job names and log lines, an error's
message. Each test publishes such text as the box would, then reads the screen as Textual
composes it for the terminal (the compositor's strips): the escape must appear drawn (`␛`,
`\\x9b`) and no raw ESC/C1 byte may be in what would be written. Markup such as `[/]` must show
as text (unescaped it raises, or styles and links the box's text).
"""

from __future__ import annotations

from typing import Any

from textual.widgets import Static, Tree

from console.tui.app import ConsoleApp
from remote.errors import RemoteError
from remote.spine import events as ev
from tests.tui_helpers import HOST, SIZE, ScriptedController, live_app, plain, settle, wait_for

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;owned\x07"
C1_CSI = "\x9b31m"
RAW = ("\x1b", "\x9b", "\x07")


def screen_text(app: ConsoleApp) -> str:
    """What the terminal would be sent for the current screen, styles aside."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def assert_drawn(text: str, *expected: str) -> None:
    for raw in RAW:
        assert raw not in text, f"raw {raw!r} reaches the terminal"
    for e in expected:
        assert e in text, f"{e!r} not shown"


def tree_text(tree: Tree[Any]) -> str:
    out: list[str] = []

    def walk(node: Any) -> None:
        out.append(node.label.plain)
        for child in node.children:
            walk(child)

    walk(tree.root)
    return "\n".join(out)


async def test_probe_tree_draws_escapes_and_markup_from_the_box() -> None:
    app = live_app(start_screen="probes")
    async with app.run_test(size=SIZE) as pilot:
        result = {"architecture": "EvilForCausalLM", "status": "unresolved",
                  "reason": f"no layers{TITLE}", "stopped_at": f"model{CLEAR}",
                  "hops": [{"class": f"Evil{CLEAR}ForCausalLM[/]", "attr": "model"},
                           {"class": f"Inner[link=http://x]Model{C1_CSI}", "layers_attr": "layers"}],
                  "layers_path": "model.layers[bold]"}
        app.source.bus.emit(ev.PROBE_RESULT, HOST, probe="model", result=result)
        app.source.bus.emit(ev.PROBE_ERROR, HOST, probe="env", message=f"env died{CLEAR}")
        await wait_for(pilot, lambda: "model" in app.state.host(HOST).probes)
        await settle(pilot)
        labels = tree_text(app.query_one("#model-tree", Tree))
        assert_drawn(labels, "Evil␛[2JForCausalLM[/]", "model: Inner[link=http://x]Model\\x9b31m",
                     "no layers␛]0;owned␇", "stopped at model␛[2J", "layers path model.layers[bold]")
        assert_drawn(screen_text(app), "Evil␛[2JForCausalLM[/]", "env died␛[2J")


async def test_patch_diff_draws_escapes_from_the_box() -> None:
    app = live_app(start_screen="patch")
    async with app.run_test(size=SIZE) as pilot:
        diff = (f"--- a/worker.py\n+++ b/worker.py\n@@ -1 +1 @@\n-x = 1\n+x = 2  # {CLEAR}{TITLE}\n"
                f"+y = '{C1_CSI}[/]'\n")
        app.source.bus.emit(ev.PATCH_PLANNED, HOST, file=f"/box/worker{CLEAR}.py", diff=diff,
                            recipes=[{"name": f"evil{TITLE}", "applies": True, "reason": "[/]"}])
        await wait_for(pilot, lambda: bool(app.state.host(HOST).patches))
        await settle(pilot)
        shown = plain(app.query_one("#diff", Static), width=200)
        assert_drawn(shown, "+x = 2  # ␛[2J␛]0;owned␇", "+y = '\\x9b31m[/]'", "-x = 1")
        assert len(shown.strip().splitlines()) == 6  # newlines stay lines
        assert_drawn(plain(app.query_one("#recipes", Static)), "evil␛]0;owned␇")
        assert_drawn(screen_text(app), "worker␛[2J.py", "␛[2J␛]0;owned␇")


async def test_job_names_and_lines_are_drawn_on_overview_and_pipeline() -> None:
    app = live_app(start_screen="overview")
    async with app.run_test(size=SIZE) as pilot:
        app.source.bus.emit(ev.JOB_STARTED, HOST, run_id="r1", name=f"evil{CLEAR}[/]", argv=["x"], pid=7)
        app.source.bus.emit(ev.JOB_LINE, HOST, run_id="r1", name=f"evil{CLEAR}[/]",
                            text=f"{TITLE}hello{C1_CSI}", offset=10)
        app.source.bus.emit(ev.STAGE_START, HOST, stage=f"train{CLEAR}", run_id="r2")
        await wait_for(pilot, lambda: "r1" in app.state.host(HOST).jobs)
        await settle(pilot)
        assert_drawn(screen_text(app), "evil␛[2J[/]", "␛]0;owned␇hello\\x9b31m")
        await pilot.press("5")
        await settle(pilot)
        assert_drawn(screen_text(app), "train␛[2J", "evil␛[2J[/]")


class FailingController(ScriptedController):
    async def plan_patch(self, host: str) -> None:
        raise RemoteError(f"the box said {CLEAR}{TITLE} [/] and died")


async def test_errors_and_notes_are_drawn() -> None:
    app = live_app(start_screen="patch")
    app.source.controller = FailingController(app.source.bus)
    async with app.run_test(size=SIZE, notifications=True) as pilot:  # toasts drawn too
        await pilot.press("p")
        await wait_for(pilot, lambda: any("died" in n for n in app.notices))
        await settle(pilot)
        assert_drawn(app.notices[-1], "␛[2J␛]0;owned␇ [/] and died")
        await wait_for(pilot, lambda: "and died" in screen_text(app), timeout=10)  # the toast
        assert_drawn(screen_text(app), "␛[2J␛]0;owned␇ [/] and died")
        app.source.bus.emit(ev.CONSOLE_ERROR, HOST, message=f"remote says {CLEAR}")
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        assert_drawn(screen_text(app), "remote says ␛[2J", "[/] and died")
