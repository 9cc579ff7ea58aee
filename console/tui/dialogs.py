"""Modal screens: help (built from the command registry), confirmation, and seek-to-time."""

from __future__ import annotations

from typing import TypeVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.events import ScreenResume
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from console.tui.registry import commands_for, key_label

T = TypeVar("T")


class _Dialog(ModalScreen[T]):
    """The app's footer lists the keys of the dialog on top, not those of the screen behind."""

    def on_screen_resume(self, event: ScreenResume) -> None:
        update = getattr(self.app, "_update_keys", None)
        if update is not None:
            self.call_after_refresh(update)


class _YesNo(_Dialog[bool]):
    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class _OneLine(_Dialog[str | None]):
    """One line of input: enter gives it (None when blank), escape none."""

    AUTO_FOCUS = "Input"  # the app turns auto-focus off for its own screens

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(_Dialog[None]):
    AUTO_FOCUS = "#help-box"  # the keys scroll it (the app turns auto-focus off for its screens)
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", id="help.close")]

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def compose(self) -> ComposeResult:
        wide = self.app.size.width >= 110  # narrow: the columns an operator needs least go
        t = Table(title=f"Keys ({self.mode})", box=None, header_style="bold", expand=True)
        t.add_column("key", style="bold cyan", no_wrap=True)
        t.add_column("command", no_wrap=True)
        t.add_column("screen", no_wrap=True)
        t.add_column("what it does")
        if wide:
            t.add_column("id", style="dim")
        for c in commands_for(self.mode):
            cells = [key_label(c.key), c.title, c.group, c.help] + ([c.id] if wide else [])
            t.add_row(*cells)
        with VerticalScroll(id="help-box"):  # scrolls: the table is taller than 24 rows
            yield Static(t, id="help-table")
            yield Static("escape closes, up/down/pgup/pgdn scroll", classes="hint")


class ConfirmScreen(_YesNo):
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            # plain Text: questions name jobs and stages, which come from the box (not markup)
            yield Static(Text(self.question), id="question")
            yield Static("y: yes   n / escape: no", classes="hint")


class SeekScreen(_OneLine):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="seek.cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="seek-box"):
            yield Static("Seek to a time: HH:MM:SS (UTC, the session's day) or +SECONDS from the start")
            yield Input(placeholder="14:03:20 or +90", id="seek-input")


class AskScreen(_OneLine):
    """One line of input (e.g. the model path the model/compat probes need)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="ask.cancel")]

    def __init__(self, question: str, placeholder: str = "", value: str = "") -> None:
        super().__init__()
        self.question, self.placeholder, self.value = question, placeholder, value

    def compose(self) -> ComposeResult:
        with Vertical(id="ask-box"):
            yield Static(self.question)
            yield Input(value=self.value, placeholder=self.placeholder, id="ask-input")


class NotesScreen(_Dialog[None]):
    """One host's notification log (k9s/lazygit style): every info, warning and error the
    console and the box said about it, newest last; toasts fade, this stays."""

    AUTO_FOCUS = "#notes-box"
    BINDINGS = [Binding("escape,q,n", "dismiss", "Close", id="notes.close")]

    def __init__(self, host: str, lines: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.host, self.lines = host, lines

    def compose(self) -> ComposeResult:
        text = Text()
        style = {"error": "bold red", "warning": "yellow", "info": "cyan"}
        for when, level, message in self.lines:
            text.append(f"{when} ", style="dim")
            text.append(f"{level:<7} ", style=style.get(level, ""))
            text.append(f"{message}\n")
        if not self.lines:
            text.append("nothing yet: actions, probes and stages report here", style="dim")
        with VerticalScroll(id="notes-box"):
            yield Static(f"Notifications on {self.host}", classes="title")
            yield Static(text, id="notes-text")
            yield Static("escape closes", classes="hint")

    def on_mount(self) -> None:
        self.query_one("#notes-box").scroll_end(animate=False)


class HostKeyScreen(_YesNo):
    """A host whose key is not in known_hosts: its fingerprint, and the operator's choice to
    trust that key (stored as `console probe --accept-new-host-key` stores it) or not. Only an
    unknown key is ever offered here: a changed key is refused with HOST KEY CHANGED."""

    BINDINGS = [
        Binding("a", "answer(True)", "Accept key", id="hostkey.accept"),
        Binding("n,escape", "answer(False)", "Cancel", id="hostkey.cancel"),
    ]

    def __init__(self, host: str, fingerprint: str, known_hosts: str) -> None:
        super().__init__()
        self.host, self.fingerprint, self.known_hosts = host, fingerprint, known_hosts

    def compose(self) -> ComposeResult:
        text = Text()
        text.append("Unknown host key\n\n", style="bold yellow")
        text.append(f"{self.host} offered a key that is not in {self.known_hosts or 'known_hosts'}:\n\n")
        text.append(f"  {self.fingerprint}\n\n", style="bold")
        text.append("Check it against the box (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub "
                    "on the box) before trusting it. Accepting stores this key, and only this key.")
        with Vertical(id="hostkey-box"):
            yield Static(text, id="hostkey-text")
            yield Static("a: accept and store   n / escape: cancel", classes="hint")
