"""Text renderings shared by the views: sparklines, bars, units. Rich only, no Textual, so the
views stay thin and these are testable as plain strings."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from rich.cells import cell_len
from rich.table import Column, Table
from rich.text import Text

BLOCKS = "▁▂▃▄▅▆▇█"


def spark(values: Iterable[float], width: int, lo: float = 0.0, hi: float | None = None) -> str:
    """The last `width` values as block characters, padded on the left so time runs right."""
    vals = list(values)[-width:]
    if not vals:
        return " " * width
    top = hi if hi is not None else max(max(vals), lo + 1e-9)
    span = max(top - lo, 1e-9)
    # The same arithmetic, clamped without min/max calls: 8 GPUs x 2 sparks of up to 32
    # values are built on every Stats update (10 Hz), the biggest item of a table build.
    last = len(BLOCKS) - 1
    steps = [int((v - lo) / span * last + 0.5) for v in vals]
    chars = [BLOCKS[i] if 0 <= i <= last else BLOCKS[0 if i < 0 else last] for i in steps]
    return " " * (width - len(chars)) + "".join(chars)


def bar(fraction: float | None, width: int) -> str:
    """A progress bar; an unknown total shows as a hatched bar rather than a fake percentage."""
    if fraction is None:
        return "░" * width
    full = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * full + "·" * (width - full)


def hbar(value: float, top: float, width: int) -> str:
    if top <= 0:
        return ""
    n = max(0.0, min(1.0, value / top)) * width
    whole = int(n)
    part = " ▏▎▍▌▋▊▉"[int((n - whole) * 8)]
    return ("█" * whole + (part if whole < width and part != " " else "")).ljust(width)


def fmt_num(v: object, digits: int = 1) -> str:
    if isinstance(v, bool) or v is None:
        return "-"
    if isinstance(v, (int, float)):
        return f"{v:,.{digits}f}" if isinstance(v, float) else f"{v:,}"
    return str(v)


def fmt_sig(v: object, digits: int = 3) -> str:
    """A measured figure as a reader wants it: `digits` significant digits (94.5, 0.0684,
    30,500,000), never a float's seventeen; a count (an int) exactly. The TUI and the HTML report (console/report/) both
    print figures through this, so one figure reads the same in both."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "-" if v is None or isinstance(v, bool) else str(v)
    if isinstance(v, int):
        return f"{v:,}"  # a count is exact
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    places = digits - 1 - math.floor(math.log10(abs(v)))
    rounded = round(float(v), places)
    if rounded and math.floor(math.log10(abs(rounded))) > math.floor(math.log10(abs(v))):
        places -= 1  # 9.996 -> 10.0: one digit moved left of the point
    return f"{rounded:,.{max(places, 0)}f}"


def fmt_pct(v: object, digits: int = 3) -> str:
    """A rate (a fraction: acceptance 0.0684) as a percentage to `digits` significant digits:
    `6.84%`; "-" where there is none."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "-"
    return f"{fmt_sig(v * 100, digits)}%"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s"


def titled_table(title: str | Text | None, *columns: str | Column, **options: Any) -> Table:
    """A table as the screens draw them: no box, a bold header, the title flush left; a column
    given by its header alone is a plain one."""
    return Table(*columns, box=None, title=title, title_justify="left", header_style="bold",
                 **options)


def right(header: str = "", **options: Any) -> Column:
    """A right-aligned column (numbers, and the figure beside a bar)."""
    return Column(header, justify="right", **options)


def meter_style(fraction: float, warn: float = 0.6, crit: float = 0.85) -> str:
    """btop/nvitop thresholds: green under `warn`, yellow under `crit`, red above."""
    return "green" if fraction < warn else "yellow" if fraction < crit else "bold red"


def meter(value: float | None, top: float | None, width: int) -> tuple[str, str]:
    """A bar on a fixed scale (0..top, never the series' own max) and its threshold style."""
    if value is None or not top or top <= 0:
        return "·" * width, "dim"
    fraction = max(0.0, min(1.0, value / top))
    return hbar(value, top, width).replace(" ", "·"), meter_style(fraction)


def elide_middle(text: str, width: int) -> str:
    """A path (or any long name) cut in its middle to `width` cells: both ends say which one it
    is (the root it lives under, the file), where a cut at the end loses the file name."""
    if len(text) <= width:
        return text
    if width < 5:
        return text[:width]
    tail = (width - 1) * 2 // 3
    return text[: width - 1 - tail] + "…" + text[-tail:]


def cut_at_word(text: str, width: int) -> tuple[int, bool]:
    """Where to cut `text` so it fits `width` cells with a trailing " …": at the last space
    before the limit (never inside a word). (cut index, whether a cut is needed)."""
    if cell_len(text) <= width:
        return len(text), False
    room = max(0, width - 2)
    head = text[:room]
    while head and cell_len(head) > room:
        head = head[:-1]
    space = head.rstrip().rfind(" ")
    cut = space if space > 0 else len(head)
    return len(head[:cut].rstrip()), True


ALERT_MARK = "⚠"


def alert_banner(alerts: Sequence[dict[str, object]], limit: int = 3) -> str:
    """The banner over the Stats and Overview screens: how many incidents, the latest ones with
    what to do ('' when there is none)."""
    if not alerts:
        return ""
    n = len(alerts)
    lines = [f"{ALERT_MARK} {n} alert{'s' if n != 1 else ''} on this host (stats.alert; docs/health.md)"]
    for a in list(alerts)[-limit:]:
        ts = a.get("ts")
        when = ts.strftime("%H:%M:%S") if hasattr(ts, "strftime") else ""
        lines.append(f"  {when} {a.get('rule')}: {a.get('message')}")
        if a.get("advice"):
            lines.append(f"    -> {a.get('advice')}")
    return "\n".join(lines)
