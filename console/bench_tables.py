"""Plain-text tables for `console bench`: what an operator reads at the end of a sweep."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from console.fleet import aligned
from remote.bench.compare import Comparison
from remote.bench.results import BenchRun, Point
from remote.bench.vllm_results import SOURCE


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _f(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def per_position_text(values: Sequence[float | None] | None) -> str:
    if not values:
        return "-"
    return " ".join(_f(v) for v in values)


def acceptance_cells(acc: dict[str, Any] | None) -> list[str]:
    if not acc:
        return ["-", "-", "-"]
    return [_pct(acc.get("rate")), _f(acc.get("mean_length")),
            per_position_text(acc.get("per_position"))]


def point_summary(label: str, p: Point) -> str:
    text = (f"{label} c={p.concurrency}: {p.requests} requests, {p.output_tok_s:.1f} tok/s, "
            f"{p.req_s:.2f} req/s, "
            f"TTFT p50 {_ms(p.ttft_p50)} ms p99 {_ms(p.ttft_p99)} ms, "
            f"TPOT p50 {_ms(p.tpot_p50)} ms p99 {_ms(p.tpot_p99)} ms")
    if p.itl_p50 is not None:
        text += f", ITL p50 {_ms(p.itl_p50)} ms"
    if p.e2el_p50 is not None:
        text += f", E2E p50 {_ms(p.e2el_p50)} ms"
    if p.acceptance:
        text += (f", acceptance {_pct(p.acceptance.get('rate'))}, "
                 f"mean length {_f(p.acceptance.get('mean_length'))}")
    if p.failed:
        text += f", {p.failed}/{p.requests} requests failed"
    return text


def run_origin(run: BenchRun) -> str:
    """Where a run's figures come from and how its timings were taken, in words."""
    if run.source == SOURCE:
        return "from vllm bench serve's result file"
    text = ("timings as vllm bench serve takes them" if run.definitions
            else "timings before #42 (TTFT at the first chunk with text)")
    if run.warmup is not None:
        text += f", warm-up {run.warmup} request{'s' if run.warmup != 1 else ''}"
    return text


def run_table(run: BenchRun) -> str:
    where = f" at {run.url}" if run.url else ""
    sampled = (f", temperature {run.temperature:g} (seed {run.seed}+i)"
               if run.temperature > 0 else "")
    head = (f"{run.label}: {run.model}{where}, max_tokens {run.max_tokens}{sampled}, "
            f"{'speculative' if run.speculative else 'no speculation'}; {run_origin(run)}")
    rows = [["CONC", "REQUESTS", "TOK/S", "REQ/S", "TTFT P50", "TTFT P99", "TPOT P50",
             "TPOT P99", "ITL P50", "E2E P50", "FAILED", "ACCEPT", "MEAN LEN", "PER POSITION"],
            ["", "", "", "", "ms", "ms", "ms", "ms", "ms", "ms", "", "", "", ""]]
    for p in run.points:
        rows.append([str(p.concurrency), str(p.requests), f"{p.output_tok_s:.1f}",
                     f"{p.req_s:.2f}", _ms(p.ttft_p50), _ms(p.ttft_p99), _ms(p.tpot_p50),
                     _ms(p.tpot_p99), _ms(p.itl_p50), _ms(p.e2el_p50), str(p.failed),
                     *acceptance_cells(p.acceptance)])
    cats = [line for p in run.points for line in category_lines(p)]
    return head + "\n" + aligned(rows, right=set(range(11))) + \
        ("\nby category:\n" + "\n".join(cats) if cats else "")


def compare_table(cmp: Comparison) -> str:
    rows = [["CONC", f"{cmp.baseline_label} TOK/S", f"{cmp.spec_label} TOK/S", "SPEEDUP",
             "BASE TPOT ms", "SPEC TPOT ms", "ACCEPT", "MEAN LEN"]]
    for r in cmp.rows:
        rows.append([str(r.concurrency), f"{r.baseline_tok_s:.1f}", f"{r.spec_tok_s:.1f}",
                     "-" if r.speedup is None else f"x{r.speedup:.2f}",
                     _ms(r.baseline_tpot_p50), _ms(r.spec_tpot_p50), _pct(r.acceptance_rate),
                     _f(r.mean_length)])
    lines = [aligned(rows, right=set(range(8)))]
    cats = category_table(cmp)
    if cats:
        lines.append(cats)
    if cmp.crossover is None:
        lines.append("crossover: none (speculation pays at every measured concurrency)"
                     if cmp.rows else "crossover: no common concurrency")
    elif cmp.last_paying is None:
        lines.append(f"crossover: speculation does not pay even at concurrency {cmp.crossover}")
    else:
        lines.append(f"crossover: speculation stops paying between concurrency "
                     f"{cmp.last_paying} and {cmp.crossover} (≈{_f(cmp.crossover_estimate, 1)})")
    lines.extend(f"warning: {w}" for w in cmp.warnings)
    return "\n".join(lines)


def category_table(cmp: Comparison) -> str:
    """Speedup and acceptance per prompt category (a window each), when the prompts had some."""
    rows = [["CONC", "CATEGORY", "SPEEDUP", "ACCEPT", "MEAN LEN"]]
    for r in cmp.rows:
        for cat, f in (r.categories or {}).items():
            rows.append([str(r.concurrency), cat,
                         "-" if f.get("speedup") is None else f"x{f['speedup']:.2f}",
                         _pct(f.get("acceptance_rate")), _f(f.get("mean_length"))])
    return "by category:\n" + aligned(rows, right={0, 2, 3, 4}) if len(rows) > 1 else ""


def category_lines(p: Point) -> list[str]:
    """A point's categories, one line each (run_table's rows, without a baseline)."""
    return [f"  c={p.concurrency} {cat}: {f.get('requests')} requests, "
            f"{f.get('output_tok_s', 0):.1f} tok/s, "
            + (f"acceptance {_pct(acc.get('rate'))}, mean length {_f(acc.get('mean_length'))}"
               if (acc := f.get("acceptance") or {}) else "no acceptance (no speculation)")
            for cat, f in (p.categories or {}).items()]


def watch_table(windows: Sequence[dict[str, Any]]) -> str:
    """windows: bench.watch payloads."""
    rows = [["WINDOW", "SECONDS", "DRAFTS", "ACCEPT", "MEAN LEN", "ACC TOK/S", "PER POSITION"]]
    for w in windows:
        acc = w.get("acceptance") or {}
        rows.append([str(w.get("window")), f"{w.get('seconds', 0):.1f}",
                     f"{acc.get('drafts', 0):.0f}", _pct(acc.get("rate")),
                     _f(acc.get("mean_length")), f"{w.get('accepted_tok_s', 0):.1f}",
                     per_position_text(acc.get("per_position"))])
    return aligned(rows, right=set(range(6)))
