"""Content updates that do not re-lay out the screen when the content's height cannot change.

`Static.update` asks for a layout by default, and one layout request re-lays out the whole
screen: every auto-height Static renders its Rich table once more just to measure its height,
then once more to paint. Under a day's load (10 stats samples and ~7 view updates a second)
those reflows were most of the TUI's CPU (profiled: Screen._refresh_layout about two thirds of
the app's time while switching screens under that load). A view knows what decides a widget's
height (rows in a table of no-wrap cells, lines of a short text): it passes that as `shape`,
and the layout is asked for only when the shape changes. `key`, when given, is everything
the content is made from: an update with the same key is skipped altogether.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from rich.cells import cell_len
from textual.widgets import Static

_UNSET = object()


def set_content(widget: Static, make: Callable[[], Any], shape: Hashable,
                key: Hashable = _UNSET) -> None:
    """Update `widget` with `make()` unless `key` is what it was; re-lay out only when `shape`
    differs from the last update's (or on the first)."""
    state = widget.__dict__
    if key is not _UNSET and state.get("_quiet_key", _UNSET) == key:
        return
    first = "_quiet_shape" not in state
    widget.update(make(), layout=first or state["_quiet_shape"] != shape)
    state["_quiet_shape"] = shape
    if key is not _UNSET:
        state["_quiet_key"] = key


def text_shape(plain: str, width: int) -> Hashable:
    """The shape of a text: its line count while every line fits in `width` cells (with a
    margin for scrollbars and padding); once one may wrap, the text itself, so that any
    change re-lays out."""
    lines = plain.split("\n")
    if all(cell_len(line) < width - 4 for line in lines):
        return len(lines)
    return plain
