"""Hosts screen: every configured host, its connection state and its environment summary."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from console.tui.messages import HostSelected
from console.tui.model import CONNECTION, PROBES, STATS, ConsoleState, HostState
from console.tui.render import cut_at_word, elide_middle
from console.tui.shown import plain
from console.tui.widgets.common import BADGE_STYLE, View
from console.tui.widgets.quick_table import QuickTable
from remote.link.hosts import config_search_path


def env_summary(env: dict[str, Any]) -> str:
    """One line from an env probe result; tolerant of missing keys (the probe may be partial)."""
    if not env:
        return "-"
    parts = []
    py = env.get("python")
    if isinstance(py, dict):  # the env probe: {executable, implementation, version}
        py = py.get("version")
    if py:
        parts.append(f"py {py}")
    packages = env.get("packages")
    pkgs: dict[str, Any] = packages if isinstance(packages, dict) else env
    for name in ("torch", "vllm", "speculators", "transformers"):
        v = pkgs.get(name)
        if isinstance(v, dict):
            v = v.get("version")
        if v:
            parts.append(f"{name} {v}")
    gpu = env.get("gpu")
    gpus = gpu.get("gpus") if isinstance(gpu, dict) else env.get("gpus")
    if isinstance(gpus, list):
        parts.append(f"{len(gpus)} GPU" + ("s" if len(gpus) != 1 else "") if gpus else "no GPU")
    return ", ".join(parts) or "-"


def first_run_note(source: object, width: int = 200) -> str:
    """What a first start needs to read: no console.toml was found, where the console looked,
    and how to add a box. Empty when a config was loaded (or in a replay: no config there)."""
    config = getattr(source, "config", None)
    if config is None or getattr(config, "path", None) is not None:
        return ""
    # one path a line, elided in its middle when the terminal is narrower: never wrapped at a
    # hyphen or cut at the end
    looked = "".join(f"\n  {elide_middle(str(p), width - 6)}" for p in config_search_path())
    return (f"No console.toml found. Looked in:{looked}\nSo only `local`, this machine, is "
            "listed. To add a box: run `console init` here (it writes a commented "
            "console.toml), uncomment a [hosts.NAME] block with ssh = \"user@box\", then start "
            "`console` again.")


class HostsView(View):
    DOMAINS = (CONNECTION, PROBES, STATS)

    def __init__(self, describe: dict[str, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.describe = describe

    def compose(self) -> ComposeResult:
        yield Static("Hosts — enter selects, c connects" if self.live
                     else "Hosts in this recording — enter selects", classes="title")
        note = first_run_note(getattr(self.app, "source", None), self.app.size.width) if self.live else ""
        if note:  # above the table: the first thing a first start reads
            yield Static(note, id="first-run", classes="hint", markup=False)
        yield QuickTable(id="hosts-table", cursor_type="row")

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("host", "target", "connection", "environment")

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        table.clear()
        # what the other columns take (their widest cell or header), and 9 cells of padding,
        # view padding and scrollbar (measured at 80 columns: 44 cells were left for 80-36)
        room = max(20, self.app.size.width - 9
                   - max(4, *(len(n) for n in state.hosts))
                   - max(6, *(len(self.describe.get(n, "")) for n in state.hosts))
                   - max(len(label) for label, _ in BADGE_STYLE.values()))
        for name, h in state.hosts.items():
            label, style = BADGE_STYLE.get(h.connection, BADGE_STYLE["unknown"])
            env = env_summary(h.probes.get("env") or {})
            # the environment column gets what is left: cut, never a sideways scroll
            end, cut = cut_at_word(env, room)
            # a host's name and target are config or session text: plain, drawn (shown.plain)
            table.add_row(plain(name), plain(self.describe.get(name, "")), f"[{style}]{label}[/]",
                          env[:end].rstrip(",") + (" …" if cut else ""), key=name)
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.post_message(HostSelected(str(event.row_key.value)))
