"""Pieces every view shares: the base view class and the connection badge."""

from __future__ import annotations

import traceback

from rich.text import Text
from textual.containers import Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from console.tui.messages import StateChanged
from console.tui.model import ConsoleState, HostState
from console.tui.quiet import set_content, text_shape
from console.tui.render import alert_banner, cut_at_word
from remote.spine.sanitize import visible


class View(Vertical):
    """A screen's content. Subclasses implement `update_view`; it runs only for messages that
    touch the domains the view renders, and on being shown.

    A bug in a view must not take the console down (Textual would end the app, exit code 0,
    with jobs still running on the box): the exception becomes a red line on top of the view
    and a note; the next state change tries again."""

    DOMAINS: tuple[str, ...] = ()
    _error: Static | None = None

    def on_state_changed(self, message: StateChanged) -> None:
        if not message.touches(*self.DOMAINS):
            return
        try:
            self.update_view(message.state, message.state.host(message.host), message.domains)
        except Exception as exc:  # shown on screen, never a silent exit
            self.show_error(exc)
        else:
            if self._error is not None:
                self._error.remove()
                self._error = None

    def show_error(self, exc: Exception) -> None:
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        text = f"this screen failed to draw: {type(exc).__name__}: {exc}"
        if where is not None:
            text += f" ({where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
        if self._error is None:
            self._error = Static(classes="view-error")
            self.mount(self._error, before=0)
        self._error.update(Text(text, style="bold red"))
        errors = getattr(self.app, "errors", None)
        if isinstance(errors, list):
            errors.append(text)

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        raise NotImplementedError

    def show_alerts(self, host: HostState, width: int) -> None:
        """The alert banner (#alerts) over the Stats and Overview screens: shown while the host
        has alerts, hidden (no line) while it has none."""
        banner = alert_banner(host.alerts)
        alerts = self.query_one("#alerts", Static)
        set_content(alerts, lambda: Text(banner, style="bold red"), shape=text_shape(banner, width),
                    key=banner)
        if alerts.display != bool(banner):
            alerts.display = bool(banner)

    @property
    def live(self) -> bool:
        """A live console, not a replay: what a view offers the operator differs."""
        return getattr(self.app, "mode", "live") == "live"


def panels(*parts: str | Widget) -> VerticalScroll:
    """A view's panels top to bottom in one scroll, the way the Overview, Stats and Bench screens
    lay out: a name is an empty Static of that id (the view's update_view fills it), a widget is
    itself (a Chart, a ChartRow)."""
    return VerticalScroll(*(Static(id=part) if isinstance(part, str) else part for part in parts))


BADGE_STYLE = {
    "live": ("● live", "bold green"),
    "reconnecting": ("◌ reconnecting", "bold yellow"),
    "down": ("✖ disconnected", "bold red"),
    "unknown": ("○ not connected", "dim"),
}


def badge_text(host: HostState, mode: str, replay_status: str = "") -> Text:
    label, style = BADGE_STYLE.get(host.connection, BADGE_STYLE["unknown"])
    if mode == "replay":  # the recording's state at this point, not a connection of ours
        label = {"live": "● was live", "down": "✖ was disconnected",
                 "unknown": ""}.get(host.connection, label)
    if host.connection == "reconnecting":
        extra = []
        if host.attempt:
            extra.append(f"attempt {host.attempt}")
        if host.retry_delay is not None:
            extra.append(f"in {host.retry_delay:g}s")
        if extra:
            label += f" ({', '.join(extra)})"
    text = Text()
    if mode == "replay":
        text.append(f"▶ replay {replay_status}".rstrip(), style="bold cyan")
        text.append("  ")
    if label:
        text.append(label, style=style)
    if host.connection in ("reconnecting", "down") and host.connection_error:
        error = host.connection_error
        end, cut = cut_at_word(error, 60)
        text.append(f"  {error[:end]}" + (" …" if cut else ""), style="dim")
    return text


def fit(text: Text, width: int) -> Text:
    """`text` cut to `width` cells at a word boundary, with " …" saying it was cut (Rich's own
    ellipsis cuts inside a word: "unknown host (Nam…")."""
    end, cut = cut_at_word(text.plain, width)
    if not cut:
        return text
    head = text.divide([end])[0]
    head.append(" …", style="dim")
    return head


# The actions that follow the box runner to its end (box_actions.py: `s`, `r`): their work is
# the whole run, so the mark names the stage running now, not the one it was started from.
PIPELINE_ACTIONS = ("start ", "resume pipeline")


def activity_label(label: str, host: HostState) -> str:
    """An action's mark in the top bar: a pipeline action's the stage running now ("start
    prepare" no longer, once prepare is done and vocab runs)."""
    if label.startswith(PIPELINE_ACTIONS):
        running = next((st.name for st in host.ordered_stages() if st.status == "running"), None)
        if running is not None:
            return f"pipeline: {running}"
    return label


class TopBar(Static):
    """Title, selected host and the connection badge, always visible."""

    def show(self, host: HostState, mode: str, replay_status: str = "",
             activity: list[str] | None = None) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        narrow = self.app.size.width < 100
        text.append(" EAGLE-3 " if narrow else " EAGLE-3 console ", style="bold reverse")
        name = visible(host.name)  # config or session text: drawn, never obeyed
        text.append(f" {name} " if narrow else f"  host: {name}  ", style="bold")
        if activity:
            # what runs now, first: an action's only sign of life until its events arrive
            more = f" +{len(activity) - 1}" if len(activity) > 1 else ""
            text.append(f" ⟳ {activity_label(activity[-1], host)}…{more} ",
                        style="bold black on yellow")
            text.append(" ")
        text.append_text(badge_text(host, mode, replay_status))
        text = fit(text, self.app.size.width)
        if text.markup != self._shown:  # skip it when nothing changed
            self._shown = text.markup
            self.update(text, layout=False)  # one line high (console.tcss): no screen reflow

    _shown = ""


class KeyBar(Static):
    """The footer: the keys usable on the current screen, from the command registry. Textual's
    Footer recomposes itself on every focus or binding change (hundreds of widgets a second
    while a log streams); this is one line of text redrawn only when the screen changes."""

    def show_keys(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs
        text = Text(no_wrap=True, overflow="ellipsis")
        for key, title in fit_keys(pairs, self.app.size.width):
            text.append(f" {key} ", style="bold reverse")
            text.append(f" {title} " if title else " ")
        if text.markup != self._shown:  # one line high (console.tcss): no screen reflow
            self._shown = text.markup
            self.update(text, layout=False)

    def on_resize(self) -> None:
        self.show_keys(self._pairs)

    _shown = ""
    _pairs: list[tuple[str, str]] = []


# Titles kept last when even short titles do not fit: help and quit, the two keys a new
# operator looks for first (an 80-column footer once showed `?` and `q` bare).
KEPT_TITLES = ("?/f1", "q")


def fit_keys(pairs: list[tuple[str, str]], width: int) -> list[tuple[str, str]]:
    """Every key of `pairs` in `width` cells: titles shortened to their first word, then left
    out (the tabs' first: the tab bar names them; then from the end; help's and quit's last),
    never a key name."""
    def cells(ps: list[tuple[str, str]]) -> int:
        return sum(len(k) + 2 + (len(t) + 2 if t else 1) for k, t in ps)

    if cells(pairs) <= width:
        return pairs
    short = [(k, t.split(" ")[0]) for k, t in pairs]
    kept = [i for i, (k, _) in enumerate(short) if k in KEPT_TITLES]
    tabs = [i for i, (k, _) in enumerate(short) if k.isdigit()]  # the tab bar names them
    order = tabs + [i for i in reversed(range(len(short))) if i not in kept and i not in tabs]
    order += kept
    for i in order:
        if cells(short) <= width:
            break
        short[i] = (short[i][0], "")
    return short
