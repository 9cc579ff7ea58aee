"""FastTable's own line building (issue #17) yields Rich's segments, style for style, for the
cells it builds without Rich: one style over the whole cell (a theme name, a definition, a
Style, an unparsable name, a link), empty, wide characters, right-justified, spans; and for the
views' tables in the shapes they take (no GPUs, processes under GPUs, narrow, wide)."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.style import Style
from rich.table import Table
from rich.text import Text

from console.tui.model import ConsoleState, HostState
from console.tui.table_lines import FastTable, simple
from console.tui.widgets.overview import gpu_table
from console.tui.widgets.stats import history_table, host_history
from remote.spine import events as ev
from remote.spine.events import Event
from tests.tui_sessions import HOST, T0


def _console(width: int) -> Console:
    return Console(width=width, color_system="truecolor", legacy_windows=False,
                   file=open("/dev/null", "w"))


def _same(table: Table, width: int) -> list[list[tuple[str, Style | None]]]:
    """FastTable's lines, asserted equal to Rich's (text, style and boundaries)."""
    console = _console(width)
    assert simple(table)
    assert FastTable(table).lines(console, console.options) is not None  # drawn here, not by Rich
    fast = [[(s.text, s.style) for s in line]
            for line in console.render_lines(FastTable(table), console.options)]
    rich = [[(s.text, s.style) for s in line] for line in console.render_lines(table, console.options)]
    assert fast == rich
    return fast


def test_cells_of_one_style_are_richs_segments() -> None:
    table = Table(box=None, header_style="bold", title="t", title_justify="left")
    table.add_column("left", no_wrap=True)
    table.add_column("right", no_wrap=True, justify="right")
    rows: list[tuple[Text | str, Text | str]] = [
        (Text("cyan", style="cyan"), Text("▁▂▃█", style="bold red")),
        (Text("theme", style="repr.number"), Text("obj", style=Style(color="green", italic=True))),
        (Text("bad", style="not-a-style"), Text("", style="cyan")),  # unparsable; empty styled
        (Text("日本語", style="yellow"), ""),  # wide characters, an empty plain cell
        (Text("link", style="link https://example.org"), "[bold]markup[/] str"),
        (Text("null", style=Style()), Text.assemble(("a", "red"), " b ", ("c", "blue"))),
        ("at 12:30 :smile:", "plain 1.0 GiB/s"),  # str cells: an emoji code; no markup at all
    ]
    for left, right in rows:
        table.add_row(left, right)
    lines = _same(table, 60)
    # each padded to its column in its own style: the left to "at 12:30 😄" (11 cells), the
    # right, right-justified, to "plain 1.0 GiB/s" (15)
    assert lines[2][1:5] == [("cyan" + " " * 7, Style.parse("cyan")), (" ", Style()), (" ", Style()),
                             (" " * 11 + "▁▂▃█", Style.parse("bold red"))]


@pytest.mark.parametrize("width", [80, 99, 140])
def test_the_views_tables_in_their_shapes(width: int) -> None:
    narrow = width < 100
    state = ConsoleState([HOST])
    for k in range(40):  # a host without GPUs: only its own history
        state.apply(Event(ev.STATS_SAMPLE, HOST, {"source": "none", "gpus": [], "host": {
            "cpu": 5.0 + k, "mem_used": 2**33, "mem_total": 2**35, "load1": 0.1 * k}}, T0))
    host: HostState = state.host(HOST)
    assert not host.gpus
    _same(host_history(host, narrow), width)
    gpus = [{"index": g, "name": "NVIDIA H200", "util": (g * 37) % 101, "mem_used": 90 * 2**30,
             "mem_total": 141 * 2**30, "power": 650.0, "power_limit": 700, "temp": 80,
             "sm_clock": 1980, "pcie_tx": 2**30, "pcie_rx": 2**20,
             "procs": [{"pid": 7, "name": "vllm-engine-core-long-name", "mem_used": 2**36}] * (g % 2)}
            for g in range(8)]
    state.apply(Event(ev.STATS_SAMPLE, HOST, {"source": "nvml", "gpus": gpus, "host": {}}, T0))
    lines = _same(gpu_table(host, 24, narrow), 140 if not narrow else width)
    assert sum("└ 7" in "".join(t for t, _ in line) for line in lines) == 4  # the procs rows
    _same(history_table(host, narrow), 140 if not narrow else width)


def test_spark_is_the_plain_formula() -> None:
    """spark's unrolled clamp draws what min/max over the same arithmetic draws."""
    from console.tui.render import BLOCKS, spark

    def plain_spark(vals: list[float], width: int, lo: float, hi: float | None) -> str:
        vals = vals[-width:]
        top = hi if hi is not None else max(max(vals), lo + 1e-9)
        span = max(top - lo, 1e-9)
        chars = [BLOCKS[min(7, max(0, int((v - lo) / span * 7 + 0.5)))] for v in vals]
        return " " * (width - len(chars)) + "".join(chars)

    values = [(k * 37 % 211) / 1.7 - 20 for k in range(300)]  # below, inside and above 0-100
    for width, lo, hi in ((32, 0.0, 100.0), (16, 0.0, 700.0), (48, 0.0, None), (24, 10.0, 50.0)):
        for n in (1, 5, width, 300):
            assert spark(values[:n], width, lo, hi) == plain_spark(values[:n], width, lo, hi)
    assert spark([-5.0, 0.0, 50.0, 100.0, 250.0], 5, 0, 100) == "▁▁▅██"


def test_table_visual_paints_richvisuals_strips() -> None:
    """TableVisual's strips are RichVisual's for the same block, in a running app (the
    widget's base and link styles applied): 8 GPUs with processes, wide and narrow, a host
    without GPUs, the running jobs (one cut, one with a tab: Rich draws that one), and a
    block too wide for its room (handed to RichVisual)."""
    import asyncio

    from rich.console import Group
    from textual.app import App, ComposeResult
    from textual.visual import RichVisual, Visual
    from textual.widgets import Static

    from console.tui.table_lines import TableVisual
    from console.tui.widgets.overview import jobs_table
    from tests.console.tui.test_tui_load import _host, _jobs

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield Static(id="block")

    host = _host(60)
    jobs = _jobs()
    empty = ConsoleState([HOST]).host(HOST)
    blocks = [
        [Text("GPUs (8)", style="bold underline"), FastTable(gpu_table(host, 24, False))],
        [Text("GPUs (8)", style="bold underline"), FastTable(gpu_table(host, 24, True))],
        [FastTable(history_table(host)), FastTable(host_history(host))],
        [FastTable(history_table(host, True)), FastTable(host_history(host, True))],
        [Text("No GPUs (no nvml)", style="yellow"), FastTable(host_history(empty))],
        [FastTable(jobs_table(jobs[:4]))], [FastTable(jobs_table(jobs))],
    ]

    async def run() -> None:
        app = One()
        async with app.run_test(size=(140, 40)):
            widget = app.query_one("#block", Static)
            drawn_here = 0
            for parts in blocks:
                for width in (140, 90, 40):
                    ours = TableVisual(widget, *parts)
                    theirs = RichVisual(widget, Group(*parts))
                    drawn_here += ours._lines_at(width) is not None
                    mine = Visual.to_strips(widget, ours, width, None, widget.visual_style)
                    rich = Visual.to_strips(widget, theirs, width, None, widget.visual_style)
                    assert [list(s) for s in mine] == [list(s) for s in rich]
                    assert ours.get_height(widget.styles, width) == theirs.get_height(
                        widget.styles, width)
            assert drawn_here >= 8  # most blocks at 140 and 90 are drawn from FastTable's lines

    asyncio.run(run())
