"""The Fleet screen's rows: one per box, read from the folded state. No Textual here.

Why a row is built from `ConsoleState` and nothing else: the Fleet screen must look the same
live and in a replay (issue 29), and the state is what both fold the same events into. Each cell
is the one fact an operator scanning several boxes needs (is it up, how loaded, what runs, is the
worker patched, what acceptance does the server reach); the details stay on the box's own
screens, which Enter on the row opens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.tui.model import ConsoleState, HostState

HEADER = ("host", "state", "cpu", "mem", "GPUs", "util", "gmem", "jobs", "patch", "accept")

# A short state word: eight boxes' rows must fit 80 columns beside eight other cells.
STATE = {"live": ("● live", "bold green"), "reconnecting": ("◌ retry", "bold yellow"),
         "down": ("✖ down", "bold red"), "unknown": ("○ off", "dim")}
REPLAY_STATE = {"live": ("● was live", "green"), "down": ("✖ was down", "red"),
                "unknown": ("○ -", "dim")}


@dataclass(frozen=True, slots=True)
class FleetRow:
    host: str
    state: str
    style: str
    cells: tuple[str, ...]  # cpu, mem, GPUs, util, gmem, jobs, patch, accept
    problem: str  # the one line that says what is wrong with this box ("" when nothing is)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def patch_word(host: HostState) -> str:
    """One word for the host's worker patch, from its patch.* events, as `console probe env
    --host GROUP` says it: patched, unpatched, refused, drift, rolled back, clean."""
    if not host.patches:
        return "-"
    states = list(host.patches.values())
    if any(p.drift for p in states):
        return "drift"
    if any(p.refused for p in states):
        return "refused"
    if any(p.status in ("applied", "verified") and p.in_effect for p in states):
        return "patched"
    if any(p.status == "rolled_back" for p in states):
        return "rolled back"
    if any(p.status == "planned" and any(r.get("applies") for r in p.recipes) for p in states):
        return "unpatched"
    return "clean"


def _acceptance(payload: dict[str, Any]) -> float | None:
    acc = payload.get("acceptance")
    if isinstance(acc, dict) and isinstance(acc.get("mean_length"), (int, float)):
        return float(acc["mean_length"])
    return None


def served_acceptance(host: HostState) -> str:
    """The served head's mean acceptance length: the latest live window (`bench watch`), else
    the latest bench point; the server's state while there is no number yet."""
    for payload in (*reversed(host.bench_watch), *reversed(host.bench_points)):
        value = _acceptance(payload)
        if value is not None:
            return f"{value:.2f}"
    srv = host.servers.get("speculative")
    return srv.state if srv is not None else "-"


def problem_line(host: HostState) -> str:
    """What is wrong with the box, in one line: its connection's error while it is not up, else
    the latest error note (a bad group member, a stream that stopped) since it was last up."""
    if host.connection in ("down", "reconnecting") and host.connection_error:
        return host.connection_error
    if host.connection == "live":
        return ""
    errors = [n.text for n in host.notes if n.level == "error"]
    return errors[-1] if errors else ""


def fleet_row(host: HostState, mode: str = "live") -> FleetRow:
    table = REPLAY_STATE if mode == "replay" else STATE
    label, style = table.get(host.connection) or STATE.get(host.connection, STATE["unknown"])
    if host.connection == "reconnecting" and host.attempt:
        label += f" {host.attempt}"
    gpus = [g.last for g in host.gpus.values()]
    utils = [float(g["util"]) for g in gpus if isinstance(g.get("util"), (int, float))]
    util = sum(utils) / len(utils) if utils else None
    used = sum(float(g.get("mem_used") or 0) for g in gpus)
    total = sum(float(g.get("mem_total") or 0) for g in gpus)
    mem = (100.0 * host.mem_used / host.mem_total
           if host.mem_used is not None and host.mem_total else None)
    running = len(host.running_jobs())
    cells = (_pct(host.cpu), _pct(mem), str(len(gpus)) if host.stats_source else "-",
             _pct(util), _pct(100.0 * used / total if total else None),
             str(running) if host.jobs or host.stats_source else "-",
             patch_word(host), served_acceptance(host))
    return FleetRow(host.name, label, style, cells, problem_line(host))


def fleet_rows(state: ConsoleState, mode: str = "live") -> list[FleetRow]:
    return [fleet_row(h, mode) for h in state.hosts.values()]


def totals(rows: list[FleetRow]) -> str:
    """The line under the table: how many boxes are up, and their GPUs and running jobs."""
    up = sum(1 for r in rows if r.state.startswith("●"))
    gpus = sum(int(r.cells[2]) for r in rows if r.cells[2].isdigit())
    jobs = sum(int(r.cells[5]) for r in rows if r.cells[5].isdigit())
    return (f"{len(rows)} host{'s' if len(rows) != 1 else ''}, {up} up, {gpus} GPU"
            f"{'s' if gpus != 1 else ''}, {jobs} job{'s' if jobs != 1 else ''} running")
