"""Box text made safe before the TUI folds it into its state.

Everything the TUI shows (probe trees, diffs, job and stage names, errors, notes, toasts) is
written by whatever runs on the box or in a replayed file. The terminal must draw its escape
and control sequences, never obey them (remote/spine/sanitize.py, issue #18): an `ESC[2J` in a
model's class name would otherwise clear the operator's screen. Sanitising once where events
enter the state covers every view at once, including the ones added later; job lines are the
exception (thousands a second), so the log views sanitise the lines they draw.

Rich markup is the second trap: a string cell or label is parsed as markup, so box text
`[/]` would raise and `[link=...]` would plant a link. Views wrap box text in `plain()`.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from remote.spine.events import Event
from remote.spine.sanitize import visible, visible_lines


def shown(value: Any) -> Any:
    """`value` with every string in it (dict keys too) drawn visibly, newlines kept (a diff, a
    log tail in an error); sanitising is idempotent, so text sanitised twice reads the same."""
    if isinstance(value, str):
        return visible_lines(value)
    if isinstance(value, dict):
        return {shown(k) if isinstance(k, str) else k: shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shown(v) for v in value]
    if isinstance(value, tuple):
        return tuple(shown(v) for v in value)
    return value


def shown_event(event: Event) -> Event:
    """The event as the TUI may show it: host and payload sanitised."""
    return Event(event.kind, visible(event.host), shown(event.payload), event.ts)


def plain(text: object, style: str = "") -> Text:
    """Box text as a Rich Text: drawn visibly, never read as markup."""
    return Text(visible(str(text)), style=style)
