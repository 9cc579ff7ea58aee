"""`console bench matrix` as text: the plan with its estimate, the matrix table, the `c=N:`
recommendations and where the time went (docs/bench-matrix.md says what each column means)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from console.bench_tables import _f, _ms
from console.fleet import aligned
from remote.bench.matrix import MatrixPlan, MatrixResult, draft_name, failed_line

COLUMNS = ["DRAFT", "T", "CONC", "N", "TOK/S", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99",
           "ACC LEN", "ACC RATE", "SPEEDUP", "ROUNDS"]
UNITS = ["", "", "", "", "", "ms", "ms", "ms", "ms", "", "", "", "lowest-highest"]


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def plan_text(plan: MatrixPlan, m: MatrixResult, estimate_s: float, path: Path) -> str:
    servers = [draft_name(d, k) for d, k in plan.servers()]
    todo = m.missing()
    starts = len({(d, k) for d, k, _, _ in todo})
    kept = f"; {len(m.cells)} cells kept from {path}" if m.cells else ""
    return (f"matrix: {len(servers)} servers ({', '.join(servers)}) x temperature "
            f"{','.join(f'{t:g}' for t in plan.temperatures)} x concurrency "
            f"{','.join(map(str, plan.concurrencies))}: {len(todo)} cells to measure, "
            f"{starts} engine starts, {_per_cell(plan)} requests per cell in {plan.rounds} "
            f"rounds, max_tokens {plan.max_tokens}{kept}; estimate {estimate_s / 60:.0f} min "
            "(engine starts ~1 min each; refined as cells are measured)")


def _per_cell(plan: MatrixPlan) -> str:
    """The requests a cell really sends: each round at least the concurrency and the same count
    (--requests 4 in 3 rounds is 3 rounds of 2), so the plan line says 6, not the 4 asked."""
    sent = {c: plan.cell_requests(c) for c in plan.concurrencies}
    if len(set(sent.values())) == 1:
        return str(next(iter(sent.values())))
    return ", ".join(f"{n} (c={c})" for c, n in sent.items())


def matrix_table(m: MatrixResult) -> str:
    rows: list[list[str]] = [COLUMNS, UNITS]
    for r in m.rows():
        speedup = "base" if r["draft"] == "none" else _x(r["speedup"])
        spread = ("-" if r["speedup_min"] is None or r["draft"] == "none"
                  else f"{r['speedup_min']:.2f}-{r['speedup_max']:.2f}")
        rows.append([r["name"], f"{r['temperature']:g}", str(r["concurrency"]),
                     str(r["requests"]), f"{r['tok_s']:.1f}", _ms(r["ttft_p50"]),
                     _ms(r["ttft_p99"]), _ms(r["tpot_p50"]), _ms(r["tpot_p99"]),
                     _f(r["acceptance_length"]),
                     "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.1%}",
                     speedup, spread])
    return aligned(rows, right=set(range(1, 13)))


def time_text(split: dict[str, Any]) -> str:
    wall = float(split.get("wall") or 0.0)

    def part(name: str, key: str) -> str:
        v = float(split.get(key) or 0.0)
        return f"{name} {v:.0f} s ({v / wall:.0%})" if wall > 0 else f"{name} {v:.0f} s"

    return (f"time: {wall:.0f} s: " + ", ".join(
        part(n, k) for n, k in (("engine starts", "engine_start"), ("warm-up", "warmup"),
                                ("measured windows", "measured"), ("the rest", "rest"))))


def matrix_report(m: MatrixResult) -> str:
    """The table, the recommendations, the missing cells and (when measured) the time split."""
    lines = [f"matrix on {m.host or '?'}: {m.model or '?'}, prompts {m.plan.prompts}, "
             f"max_tokens {m.plan.max_tokens}", matrix_table(m), ""]
    cats = m.category_rows()
    if cats:
        lines.append("by prompt category (speedup, acceptance length):")
        for cell, figs in cats:
            lines.append(f"  {cell.name} T={cell.temperature:g} c={cell.concurrency}: " + ", ".join(
                f"{cat} {_x(f['speedup'])} ({_f(f['acceptance_length'])})"
                for cat, f in figs.items()))
        lines.append("")
    lines += m.recommendations()
    missing = m.missing()
    if missing:
        names = sorted({draft_name(d, k) for d, k, _, _ in missing})
        lines.append(f"not measured: {len(missing)} cells ({', '.join(names)}); rerun the "
                     "same command to measure them")
    lines += failed_text(m)
    if m.time_split:
        lines.append(time_text(m.time_split))
    return "\n".join(lines)


def failed_text(m: MatrixResult) -> list[str]:
    """A line per cell with failed requests, with the first reason (the file keeps them)."""
    lines = []
    for r in m.rows():
        cell = m.cells[(r["draft"], r["k"], r["temperature"], r["concurrency"])]
        line = failed_line(r, next((e for p in cell.rounds for e in p.errors), None))
        if line:
            lines.append(line)
    return lines
