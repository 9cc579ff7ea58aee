"""The operator console: one app, fed by a Source (live hosts or a replayed session file).

Events arrive on the source's bus; a bus callback only queues them (O(1), so a job printing
10,000 lines/s never waits on the UI). A single pump task folds the queue into ConsoleState at
most ~30 times a second; the visible view is told what changed at most every REFRESH_S (see
there), and the views not on screen not at all until they are shown. Actions go to the
source's Controller in workers, never on the UI loop; their results come back as events like
everything else. Key bindings, the command palette and the help screen come from one registry.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack, suppress
from functools import partial
from typing import Any, ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Input
from textual.worker import Worker, WorkerState

from console.tui.box_actions import BoxActions
from console.tui.checkpoints import StateCheckpoints
from console.tui.collector import SwitchCollector
from console.tui.controller import (
    ReplaySource,
    Source,
)
from console.tui.dialogs import HelpScreen, NotesScreen
from console.tui.main_screen import MainScreen
from console.tui.messages import HostSelected, StateChanged
from console.tui.model import ConsoleState
from console.tui.registry import COMMANDS, SCREENS, Command, key_label
from console.tui.replay_controls import ReplayControls
from console.tui.screens import NARROW, make_view, shown_screens, tab_titles
from console.tui.widgets.common import KeyBar, TopBar, View
from console.tui.widgets.patch import PatchView
from console.tui.widgets.replay import MarkerRow, ReplayView
from console.tui.widgets.tab_bar import TabBar
from remote.errors import EXIT_OK, RemoteError
from remote.link import aio
from remote.spine.events import Event, format_ts
from remote.spine.sanitize import visible, visible_lines

FRAME_S = 1 / 30  # the pump folds queued events at most this often
# The visible view and the top bar redraw at most this often under a stream of events: as often
# as a box samples its stats by default (10 a second, `stats_interval` in console.toml), so the
# Stats screen shows every sample (at 4 Hz it showed 4 of 10; issue 30). A training job's 500
# lines a second are folded into these redraws, so the TUI's CPU is bounded by the screen, not
# by the box's event rate (benchmarks/tui_day_load.py measures it under an 8-GPU day's load;
# docs/measurements.md). What the operator does (a key, a switch, a seek, a host) is drawn at
# once: only the stream is held.
REFRESH_S = 0.1
# A screen switch paints once, when the new screen is ready (its view updated, focus moved), not
# the old screen blurred, then the new one, then the new one focused; never held longer than this.
SWITCH_HOLD_S = 1.0
# The collector stays paused this long after a switch's paint, while the paint is written out.
WRITE_OUT_S = 0.05
DRAIN_SLICE_S = 0.008  # fold for at most this long per frame, so key presses are never starved
DRAIN_CHECK = 256  # events folded between clock checks


def _action_name(action: str) -> str:
    return action.split("(", 1)[0]


def _palette_provider() -> Any:
    from console.tui.palette import RegistryCommands

    return RegistryCommands


class ConsoleApp(BoxActions, ReplayControls, App[int]):
    TITLE = "EAGLE-3 console"
    CSS_PATH = "console.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(c.key, c.action, c.title, show=c.show, id=c.id, key_display=key_label(c.key))
        for c in COMMANDS]
    COMMANDS = {_palette_provider}  # textual.command is imported when the palette first opens
    ENABLE_COMMAND_PALETTE = True
    # Focus is given by _activated when a screen is shown; Textual's own auto-focus could land
    # late in the start pane and pull the tabs back to it after the operator switched.
    AUTO_FOCUS = None

    def __init__(self, source: Source, *, describe: dict[str, str] | None = None,
                 start_screen: str | None = None) -> None:
        super().__init__()
        self.source = source
        self.mode = source.mode
        names = source.host_names()
        self.state = ConsoleState(names)
        self.current_host = names[0]
        self.describe = describe or {}
        self.start_screen = start_screen or ("replay" if self.mode == "replay" else "hosts")
        self.notices: list[str] = []  # what notify() showed, kept for tests and the help line
        self.notice_log: list[tuple[str, str, str]] = []  # (title, severity, message) of each
        self._pending: deque[Event] = deque()
        self._wake = asyncio.Event()
        self._unsubscribe: Callable[[], None] | None = None
        self._markers: list[int] = []
        self.checkpoints: StateCheckpoints | None = None  # replay: state copies for seeks
        self._stopping = threading.Event()
        self.seeking = 0  # seeks whose state is still being rebuilt
        self.probe_targets: dict[str, str] = {}  # host -> model path or architecture last probed
        self._known_hosts: set[str] = set(self.state.hosts)
        self.activity: list[str] = []  # labels of the actions running now (the top bar shows them)
        self.errors: list[str] = []  # exceptions a view raised, shown instead of exiting
        self._source_worker: Any = None
        self.serve_pipelines: dict[str, str] = {}  # host -> pipeline last served ("demo" or a path)
        self.bench_options: dict[str, str] = {}  # host -> bench options last run
        self.matrix_options: dict[str, str] = {}  # host -> bench matrix options last run
        # Domains changed since the visible view was last told (None: nothing held); the held
        # refresh goes out REFRESH_S after the previous one.
        self._held: set[str] | None = None
        self._chrome_held = False
        self._next_post = 0.0
        self._next_chrome = 0.0
        self._switch_hold: object | None = None  # the switch whose paint is being held
        self._switch_timer: Timer | None = None  # its SWITCH_HOLD_S fallback release
        self._switch_batch = ExitStack()  # App.batch_update() held from the key to the paint
        self._blur_after_paint: list[Widget] = []  # hidden by a switch, blurred once it painted
        # The cycle collector: paused from a switch's key to its paint, and the start-up heap
        # frozen out of its full scans (collector.py says why).
        self.collector = SwitchCollector()
        self._views: dict[str, View] = {}  # screen name -> its view, once mounted
        self._active = self.start_screen  # the screen shown (its view is the one displayed)
        # One widget draws the whole tab bar (tab_bar.py says why); views mount after it.
        self.screens = shown_screens(self.mode, len(names))
        self._tab_bar = TabBar(tab_titles(self.screens), self.start_screen, narrow=NARROW, id="tabs")
        # An animation is a repaint per frame (Textual's tab underline slid for ~18 per switch):
        # the console switches and scrolls at once.
        self.animation_level = "none"

    def get_default_screen(self) -> MainScreen:
        return MainScreen(id="_default")

    # -- layout ----------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        # The tab bar and the views are children of the screen itself, not of a TabbedContent:
        # every container spanning the screen is one more full-screen layer that Textual
        # renders and cuts line by line on each paint (TabbedContent, its ContentSwitcher and
        # a TabPane were three of the six layers under the Overview's tables). A switch shows
        # one view and hides the other (`display`); views are mounted on first show, so the
        # first paint only pays for one, and keep their state while hidden.
        yield TopBar(id="topbar")
        yield self._tab_bar
        yield KeyBar(id="keybar")

    def view(self, name: str) -> View | None:
        """The view of screen `name` if it has been shown (mounted) yet.

        Kept in a dict, not queried: a query walks the whole DOM (~40 widgets a view, 3-4 ms
        on a loaded core) and every refresh and switch asks for views several times."""
        view = self._views.get(name)
        if view is not None and view.parent is None and view.is_mounted:
            del self._views[name]  # removed from the DOM since
            return None
        return view

    def ensure_view(self, name: str) -> View:
        view = self.view(name)
        if view is None:
            view = make_view(name, self.describe, self._marker_rows)
            view.display = name == self._active
            main = self.screen_stack[0]
            main.mount(view, after=self._tab_bar)
            self._views[name] = view
        return view

    def _marker_rows(self) -> list[MarkerRow]:
        if not isinstance(self.source, ReplaySource):
            return []
        reader = self.source.reader
        rows = []
        for i in self._markers:
            try:
                e = reader.event(i)
            except RemoteError:
                continue
            label = str(e.payload.get("summary") or e.payload.get("label") or e.payload.get("stage")
                        or e.payload.get("file") or e.payload.get("name") or "")
            rows.append(MarkerRow(i, format_ts(e.ts)[11:19], e.kind, label))
        return rows

    def on_mount(self) -> None:
        self._unsubscribe = self.source.bus.add_callback(self._on_event)
        if isinstance(self.source, ReplaySource):
            self._markers = self.source.replayer.markers()
            # Seeks start from the nearest state copy instead of the session's first event.
            self.checkpoints = StateCheckpoints(self.source.reader.path, self.source.host_names())
            self.run_worker(partial(self.checkpoints.build, self._stopping), thread=True, name="checkpoints",
                            group="checkpoints", exit_on_error=False)
        self.ensure_view(self.start_screen)
        self.call_after_refresh(self._activated)  # focus in the first view, its keys
        self._update_keys()
        self.run_worker(self._pump(), name="pump", group="pump")
        self._start_source()
        self.refresh_all()
        self.call_after_refresh(self.collector.settle)  # what the first paint built lives on

    def _start_source(self) -> None:
        """(Re)start the source's loop: a replay's ends at the end of the file, and must run again
        after a seek back (0, [) so space plays it again."""
        worker = self._source_worker
        if worker is None or worker.is_finished:
            self._source_worker = self.run_worker(self.source.run(), name="source", group="source",
                                                  exit_on_error=False)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name == "checkpoints" and event.state == WorkerState.SUCCESS:
            self.collector.settle()  # the seek checkpoints live as long as the replay

    async def on_unmount(self) -> None:
        self._stopping.set()
        self.collector.release()
        if self._unsubscribe:
            self._unsubscribe()
        if self.checkpoints is not None:
            self.checkpoints.close()

    # -- the event pump ----------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        self._pending.append(event)
        self._wake.set()

    async def _pump(self) -> None:
        while True:
            due = self._due()
            if due is None:
                await self._wake.wait()
            elif due > 0:
                with suppress(TimeoutError):
                    await aio.wait_for(self._wake.wait(), due)
            self._wake.clear()
            # From a switch's key to its paint the stream waits in the queue (O(1) per event):
            # the operator's switch is drawn at once, the stream's fold a frame after it.
            if self._switch_hold is None:
                self._fold()
                self._flush_held(force=False)
            if self._pending:
                self._wake.set()
            await asyncio.sleep(FRAME_S)

    def _due(self) -> float | None:
        """Seconds until a held refresh is due (None: nothing is held)."""
        now = time.perf_counter()
        due = [t - now for held, t in ((self._held is not None, self._next_post),
                                       (self._chrome_held, self._next_chrome)) if held]
        return max(0.0, min(due)) if due else None

    def drain(self) -> None:
        """Fold queued events and tell the visible view what changed, now (a step, a test)."""
        self._fold()
        self._flush_held(force=True)

    def _fold(self) -> None:
        """Fold queued events into the state, noting what changed for the visible view."""
        pending = self._pending
        if not pending:
            return
        self._chrome_held = True
        changed: set[str] = set()
        hosts: set[str] = set()
        apply = self.state.apply
        popleft = pending.popleft
        clock = time.perf_counter
        deadline = clock() + DRAIN_SLICE_S
        while pending:
            for _ in range(min(len(pending), DRAIN_CHECK)):
                e = popleft()
                d = apply(e)
                if d:
                    changed |= d
                    hosts.add(e.host)
            if clock() > deadline:
                break  # the rest waits for the next frame; the pump wakes again at once
        new_hosts = [h for h in self.state.hosts if h not in self._known_hosts]
        if new_hosts:
            self._known_hosts.update(new_hosts)
            changed.add("connection")
        # The Fleet screen shows every host: any host's change is its change.
        if (self.current_host in hosts or "markers" in changed or new_hosts or "connection" in changed
                or (hosts and self._active == "fleet")):
            self._held = changed if self._held is None else self._held | changed

    def _flush_held(self, force: bool) -> None:
        """Post the held refresh when it is due (or forced); else the top bar alone when due."""
        now = time.perf_counter()
        if self._held is not None and (force or now >= self._next_post):
            domains = frozenset(self._held)
            self._held = None
            self._next_post = now + REFRESH_S
            self._post_state(domains)
        elif force or (self._chrome_held and now >= self._next_chrome):
            self._update_chrome()

    def _post_state(self, domains: frozenset[str]) -> None:
        view = self.active_view
        if view is not None:
            view.post_message(StateChanged(self.state, self.current_host, domains))
        hosts_view = self.view("hosts")
        if "connection" in domains and hosts_view is not None and hosts_view is not view:
            hosts_view.post_message(StateChanged(self.state, self.current_host, domains))
        self._update_chrome()

    def refresh_all(self) -> None:
        """Everything changed (startup, host switch, seek)."""
        self._known_hosts = set(self.state.hosts)
        self._held = None
        self._post_state(frozenset())

    def _update_chrome(self) -> None:
        self._chrome_held = False
        self._next_chrome = time.perf_counter() + REFRESH_S
        bars = self.query(TopBar)
        if not bars:
            return  # the screen is being torn down (the pump may wake on a due refresh then)
        bars.first(TopBar).show(self.state.host(self.current_host), self.mode,
                                self.replay_status(), self.activity)
        replay_view = self.view("replay")
        # Hidden, the replay screen's status waits: it is set when the screen is shown.
        if isinstance(replay_view, ReplayView) and replay_view is self.active_view:
            replay_view.set_status(self._replay_text())

    # -- views -------------------------------------------------------------------------------------
    @property
    def active_screen_name(self) -> str:
        return self._active

    @property
    def active_view(self) -> View | None:
        return self.view(self._active)

    def on_tab_bar_activated(self, event: TabBar.Activated) -> None:
        """A tab clicked, or moved to with left/right on the focused tab bar (the bar reports
        only the operator's choices, never the `active` the console sets)."""
        self.action_show(event.name)

    def _activated(self) -> None:
        self._held = None  # the shown view gets everything now, the stream a period later
        self._next_post = time.perf_counter() + REFRESH_S
        self._post_state(frozenset())
        view = self.active_view
        focused = None
        if view is not None:
            focusable = [w for w in view.query("*") if w.focusable]
            if focusable:
                focused = focusable[0]
                focused.focus()
        self._update_keys()
        self._release_after([w for w in (view, focused) if w is not None])

    # -- one paint per screen switch ----------------------------------------------------------------
    def _hold_switch(self) -> None:
        """Hold painting from the key until the new screen is ready (_activated releases it)."""
        if self._switch_hold is not None:
            return
        hold = self._switch_hold = object()
        self._switch_batch.enter_context(self.batch_update())
        self.collector.pause()
        # A fallback only: left running, it woke the loop SWITCH_HOLD_S later, right into the
        # next switch of an operator flipping screens once a second; _release_switch stops it.
        self._switch_timer = self.set_timer(SWITCH_HOLD_S, lambda: self._release_switch(hold))

    def _release_after(self, pumps: list[Any]) -> None:
        """Release the held paint once each of `pumps` has handled what was posted to it so far
        (the view its StateChanged, the focused widget its Focus): a message queue is FIFO."""
        hold = self._switch_hold
        if hold is None:
            return
        left = [len(pumps)]

        def one_done() -> None:
            left[0] -= 1
            if left[0] <= 0:
                # One hop more: the widgets the view updated post their own repaint and layout
                # requests to the screen from their idle handlers, after the view's queue.
                self.call_after_refresh(self._release_switch, hold)

        if not pumps:
            self.call_after_refresh(self._release_switch, hold)
        for pump in pumps:
            if not pump.call_after_refresh(one_done):
                one_done()

    def _release_switch(self, hold: object) -> None:
        if self._switch_hold is hold:
            self._switch_hold = None
            if self._switch_timer is not None:
                self._switch_timer.stop()
                self._switch_timer = None
            self._switch_batch.close()
            # The screen skipped its layout and paint while the batch held them; with nothing
            # more arriving (a replay at its end, an idle host) it would not look again.
            self.screen.check_idle()
            if self._blur_after_paint and not self.call_after_refresh(self._blur_hidden):
                self._blur_hidden()
            # The collector runs again a little after that paint, unless another switch began.
            if not self.call_after_refresh(self._resume_collector_later):
                self.collector.resume()

    def _blur_hidden(self) -> None:
        """What Screen.set_focus(None) did at the key, for the widgets a switch hid: unless
        shown and focused again since, they lose their focused look (a Blur, as Textual sends:
        the widget restyles itself and its scrollbars). set_focus would also restyle the
        ancestors that have :focus-within rules; the console's CSS has none
        (tests/console/tui/test_public_textual.py checks it), so the Blur is all of it."""
        main = self.screen_stack[0]
        widgets, self._blur_after_paint = self._blur_after_paint, []
        for widget in widgets:
            if widget is not main.focused and widget.has_focus and widget.is_attached:
                widget.post_message(events.Blur())

    def _resume_collector_later(self) -> None:
        """Textual hands the paint to a writer thread, which needs the GIL to reach the
        terminal: a full collection started at once (the one the switch deferred; measured in
        tmux: 98 ms) held the screen back until it ended."""
        if self._switch_hold is None:
            self.set_timer(WRITE_OUT_S, self._resume_collector)

    def _resume_collector(self) -> None:
        if self._switch_hold is None:
            self.collector.resume()

    def _update_keys(self) -> None:
        """The footer lists the keys of what has the keyboard: an open dialog's own keys, not
        those of the screen behind it."""
        if len(self.screen_stack) > 1:
            bindings = [b for b in self.screen.BINDINGS if isinstance(b, Binding)]
            pairs = [(key_label(b.key).replace("escape", "esc"), b.description)
                     for b in bindings]
            if any(isinstance(w, Input) for w in self.screen.query("*")):
                pairs.insert(0, ("enter", "OK"))
        else:
            pairs = [(key_label(c.key), c.title) for c in COMMANDS
                     if c.show and self.check_action(_action_name(c.action), ()) is not False]
        self.query_one(KeyBar).show_keys(pairs)

    def push_screen(self, *args: Any, **kwargs: Any) -> Any:
        result = super().push_screen(*args, **kwargs)
        self.call_after_refresh(self._update_keys)
        return result

    def pop_screen(self) -> Any:
        result = super().pop_screen()
        self.call_after_refresh(self._update_keys)
        return result

    async def action_quit(self) -> None:
        """Quitting leaves the box's jobs running (they are detached): say which, and ask."""
        running = [(h.name, j) for h in self.state.hosts.values() for j in h.running_jobs()]
        if self.mode != "live" or not running:
            self.exit(self.return_code or EXIT_OK)
            return
        names = ", ".join(f"{j.name} on {host}" for host, j in running[:3])
        more = f" and {len(running) - 3} more" if len(running) > 3 else ""
        self._confirm(
            f"{len(running)} job{'s' if len(running) != 1 else ''} still running ({names}{more}). "
            "They keep running on the box (a pipeline run through evaluate); the next start "
            "reattaches to a pipeline run started here by itself, c to the rest. Quit now?",
            lambda: self.exit(EXIT_OK))

    def action_show(self, name: str) -> None:
        if name not in self.screens:
            if name == "fleet":
                self.notify("the Fleet screen needs several hosts: console --host GROUP", timeout=3)
            return
        if name == self._active:
            return
        if len(self.screen_stack) == 1:
            self._hold_switch()
        main = self.screen_stack[0]
        old = self.view(self._active)
        # The new view takes focus once it is shown (_activated); the keys go nowhere till then.
        blurred = main.focused
        if blurred is not None and old is not None and self._switch_hold is not None \
                and old in blurred.ancestors:
            # Hidden from this switch on, the old view's widget is blurred after the paint: its
            # Blur restyles it (and its scrollbars), half of a switch's restyle CPU, for a look
            # nobody sees until that view is shown again. Anything left visible (the tab bar)
            # is blurred at once: the paint must not show it focused.
            main.focused = None
            self._blur_after_paint.append(blurred)
        else:
            main.set_focus(None)
        self._active = name
        view = self.ensure_view(name)
        if old is not None:
            old.display = False
        view.display = True
        self._tab_bar.active = name
        self.call_after_refresh(self._activated)

    async def run_command(self, command: Command) -> None:
        """From the palette: a command of another screen switches there first, then runs."""
        if command.group in SCREENS and command.group != self.active_screen_name:
            self.action_show(command.group)
            await asyncio.sleep(0)
        await self.run_action(command.action)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.mode))

    def action_notes(self) -> None:
        host = self.state.host(self.current_host)
        lines = [(f"{n.ts:%H:%M:%S}", n.level, n.text) for n in host.notes]
        self.push_screen(NotesScreen(host.name, lines))

    def action_diff_wrap(self) -> None:
        view = self.view("patch")
        if isinstance(view, PatchView):
            view.toggle_wrap()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide commands that belong to another screen or the other mode from footer and keys."""
        for c in COMMANDS:
            if _action_name(c.action) != action:
                continue
            if (c.replay_only and self.mode != "replay") or (c.live_only and self.mode != "live"):
                return False
            if action == "show":
                return not parameters or parameters[0] in self.screens
            if c.group in ("global", "replay"):
                return True
            return self.screen is self.screen_stack[0] and self.active_screen_name == c.group
        return True

    def on_host_selected(self, message: HostSelected) -> None:
        self.current_host = message.host
        self.state.host(message.host)
        self.notify(f"host: {message.host}", timeout=2)
        self.refresh_all()
        if message.screen:
            self.action_show(message.screen)

    # -- toasts -------------------------------------------------------------------------------------
    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every toast is drawn sanitised: its message often carries box text (an error, a log
        tail), so control sequences are shown, never obeyed; `markup` is for the console's own
        messages only (callers pass box text with markup=False)."""
        message, title = visible_lines(message), visible(title)
        self.notices.append(message)
        self.notice_log.append((title, str(severity), message))
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
