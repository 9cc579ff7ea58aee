"""Text from the box made safe to show: every control character is drawn, never obeyed.

A job's log, a probe's stderr or a patched file's diff is written by whatever runs on the box.
Passed raw to a terminal, `ESC [2J` clears the operator's screen, an OSC sequence retitles the
window or plants a hyperlink, a CSI in C1 form (0x9b) does the same on terminals that honour
C1, and bidi overrides make text read differently from what it is. Every path that shows
remote text (the headless printer, the TUI's log view) goes through `visible`, so the escape
arrives as `␛[2J`: the operator sees that the box sent it, and nothing happens.

It is the one sanitising point (issue 33): the printer, error lines (console/cli.py), `console
hosts`, the header and warnings of `console replay --print`, the session decoder and the TUI
(console/tui/shown.py, the host table and top bar) all call it, on anything that came from
outside: config, box, session file, model names. Newlines are drawn too (`␊`): a one-line field
(a host name) cannot start a line of its own that would pass for the console's.

Tabs stay (they are layout, and the views expand them). C0 controls and DEL become their
Unicode control pictures (one character each, so column widths hold); C1 controls and the
bidi/invisible format characters become `\\x9b` / `<U+202E>`.
"""

from __future__ import annotations

_KEEP = {"\t"}
# Bidi embeddings/overrides/isolates and the invisible marks that reorder or hide text, and the
# Unicode line/paragraph separators (a second way to break a one-line field across lines).
_FORMAT = {*(chr(c) for c in range(0x202A, 0x202F)), *(chr(c) for c in range(0x2066, 0x206A)),
           "\u200e", "\u200f", "\u061c", "\u2028", "\u2029"}


def _table() -> dict[int, str]:
    table: dict[int, str] = {}
    for c in range(0x20):
        if chr(c) not in _KEEP:
            table[c] = chr(0x2400 + c)  # ␀ .. ␟ (ESC is ␛)
    table[0x7F] = "\u2421"  # ␡
    for c in range(0x80, 0xA0):
        table[c] = f"\\x{c:02x}"
    for ch in _FORMAT:
        table[ord(ch)] = f"<U+{ord(ch):04X}>"
    return table


_TABLE = _table()


def visible(text: str) -> str:
    """`text` with every control and format character drawn instead of interpreted."""
    return text.translate(_TABLE)


def visible_lines(text: str) -> str:
    """Like `visible`, keeping newlines (for multi-line text such as a diff)."""
    return "\n".join(visible(line) for line in text.split("\n"))
