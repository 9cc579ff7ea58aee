"""The speculation matrix as data: drafts x K x temperature x concurrency, its cells, its result
file and the recommendation it ends with (`console bench matrix`; the runs are remote/ops/matrix.py).

Which speculation makes a model faster on a box is measured, not guessed: n-gram was measured
9-26 % slower than none on the seed's MoE target, and vLLM threads show K=2 beating K=4 and 7
(docs/design.md §12). So the matrix measures every (draft, K) server against the baseline
("none") served in the same run, at every temperature and concurrency asked.

A cell is `rounds` windows of the same point (driver.run_point): its tokens/s is all its tokens
over all its windows' time, its speedup that over the baseline cell's (same temperature and
concurrency), and the spread is the lowest and highest round's tokens/s over the baseline's
mean: how much the figure moves on this box from one window to the next.

The result file is rewritten after every cell (atomically), so a matrix stopped halfway keeps
what it measured; a rerun with the same plan reads it back and measures only the cells missing.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from remote.bench.metrics import sum_acceptance
from remote.bench.results import Point
from remote.errors import ResultFileError, UsageError

FORMAT = "eagle3-console-bench-matrix"
VERSION = 1
NONE = "none"
NGRAM = "ngram"
PIPELINE = "pipeline"
# Before anything is measured: an engine start on a GPU box or these CPU cores takes about a
# minute (docs/design.md §7: 36-70 s here); a window's time is guessed from this decode rate per
# request in flight, then replaced by the rate the matrix measures.
GUESS_START_S = 60.0
GUESS_TOK_S_PER_STREAM = 20.0


def parse_list(text: str, what: str, kind: type) -> list[Any]:
    """A comma-separated option, each value checked, duplicates dropped, order kept."""
    out: list[Any] = []
    for raw in text.split(","):
        raw = raw.strip()
        if not raw:
            continue
        try:
            value = kind(raw)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise UsageError(f"{what} {text!r}: {raw!r} is not {noun}") from None
        if (kind is float and (not math.isfinite(value) or value < 0)) or \
                (kind is int and value < 1):
            raise UsageError(f"{what} {text!r}: {raw!r} is out of range")
        if value not in out:
            out.append(value)
    if not out:
        raise UsageError(f"{what} {text!r}: no value")
    return out


def parse_concurrency(text: str) -> list[int]:
    """--concurrency: each level measured once, lowest first."""
    return sorted(parse_list(text, "--concurrency", int))


def parse_drafts(text: str) -> list[str]:
    """none, ngram, pipeline or a head directory on the box, each optionally `@K` to serve it
    at that K alone instead of every --k; the baseline is always measured (first), named or
    not."""
    drafts = [d for d in (s.strip() for s in text.split(",")) if d]
    if not drafts:
        raise UsageError(f"--drafts {text!r}: no draft")
    out = [NONE]
    for d in drafts:
        base, k = split_pinned(d)
        if base == NONE and k is not None:
            raise UsageError(f"--drafts {text!r}: none drafts nothing, it takes no @K")
        if d not in out:
            out.append(d)
    return out


def split_pinned(draft: str) -> tuple[str, int | None]:
    """`DRAFT@K` -> (DRAFT, K); a draft without a numeric @K suffix -> (draft, None)."""
    base, at, k = draft.rpartition("@")
    if at and base and k.isdigit() and int(k) >= 1:
        return base, int(k)
    if at and base and not k.isdigit():
        return draft, None  # an @ that is part of a directory's name
    if at:
        raise UsageError(f"--drafts: {draft!r}: K after @ must be a positive integer")
    return draft, None


def failed_line(row: Mapping[str, Any], why: str | None = None) -> str | None:
    """`failed requests: CELL: F of N (why)` for a cell row (rows(), or a cell event's payload)
    with failed requests; None without. The table's N counts them, the CLI's report and the
    TUI's matrix panel say them in these words."""
    failed = row.get("failed")
    if not isinstance(failed, int) or not failed:
        return None
    return (f"failed requests: {row.get('name')} T={float(row.get('temperature') or 0):g} "
            f"c={row.get('concurrency')}: {failed} of {row.get('requests')}"
            + (f" ({why})" if why else ""))


def draft_name(draft: str, k: int) -> str:
    """How a (draft, K) server reads in tables and recommendations."""
    if draft == NONE:
        return "none"
    what = {NGRAM: "n-gram", PIPELINE: "eagle3"}.get(draft) or \
        (os.path.basename(draft.rstrip("/")) or draft)
    return f"{what} K={k}"


@dataclass(frozen=True)
class MatrixPlan:
    """What is swept and how each cell is measured: a rerun continues a file only when its plan
    is this one."""

    drafts: list[str]  # NONE first
    ks: list[int]
    temperatures: list[float]
    concurrencies: list[int]
    max_tokens: int
    requests: int  # per cell, split over its rounds (each round at least the concurrency)
    rounds: int
    prompts: str
    prompts_sha256: str
    seed: int = 0
    warmup: int = 1
    ignore_eos: bool = True
    target: str = ""  # the pipeline config served (--demo: the demo's)

    def servers(self) -> list[tuple[str, int]]:
        """(draft, K) per engine, in the order served: the baseline first."""
        out = [(NONE, 0)]
        for d in self.drafts:
            base, pinned = split_pinned(d)
            if base != NONE:
                out += [(base, k) for k in ([pinned] if pinned else self.ks)]
        return out

    def cell_keys(self, draft: str, k: int) -> list[tuple[str, int, float, int]]:
        return [(draft, k, t, c) for t in self.temperatures for c in self.concurrencies]

    def round_requests(self, concurrency: int) -> int:
        return max(concurrency, math.ceil(self.requests / self.rounds))

    def cell_requests(self, concurrency: int) -> int:
        """What a cell really sends over its rounds: --requests rounded up to whole rounds."""
        return self.rounds * self.round_requests(concurrency)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Cell:
    draft: str
    k: int
    temperature: float
    concurrency: int
    rounds: list[Point] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, int, float, int]:
        return (self.draft, self.k, self.temperature, self.concurrency)

    @property
    def name(self) -> str:
        return draft_name(self.draft, self.k)

    def figures(self) -> dict[str, Any]:
        """The cell's own figures over all its rounds (no baseline needed)."""
        tokens = sum(p.output_tokens for p in self.rounds)
        duration = sum(p.duration for p in self.rounds)
        ttfts = [t for p in self.rounds for t in (p.ttfts or []) if t is not None]
        tpots = [(lat - t) / (n - 1) for p in self.rounds
                 for t, lat, n in zip(p.ttfts or [], p.latencies or [], p.output_lens or [],
                                      strict=False)
                 if t is not None and lat is not None and n > 1]
        acc = sum_acceptance([p.acceptance for p in self.rounds if p.acceptance])
        from remote.bench.driver import percentile

        return {
            "requests": sum(p.requests for p in self.rounds),
            "failed": sum(p.failed for p in self.rounds),
            "output_tokens": tokens, "duration": duration,
            "tok_s": tokens / duration if duration > 0 else 0.0,
            "round_tok_s": [p.output_tok_s for p in self.rounds],
            "ttft_p50": percentile(ttfts, 50), "ttft_p99": percentile(ttfts, 99),
            "tpot_p50": percentile(tpots, 50), "tpot_p99": percentile(tpots, 99),
            "acceptance_length": acc.get("mean_length") if acc else None,
            "acceptance_rate": acc.get("rate") if acc else None,
            "acceptance": acc,
        }

    def categories(self) -> dict[str, dict[str, Any]]:
        """Per prompt category (the prompt file named some): tokens/s and acceptance over the
        category's windows of every round; {} otherwise."""
        out: dict[str, dict[str, Any]] = {}
        for p in self.rounds:
            for cat, f in (p.categories or {}).items():
                acc = out.setdefault(cat, {"output_tokens": 0, "duration": 0.0, "acc": []})
                acc["output_tokens"] += int(f.get("output_tokens") or 0)
                acc["duration"] += float(f.get("duration") or 0.0)
                if f.get("acceptance"):
                    acc["acc"].append(f["acceptance"])
        return {cat: {"tok_s": a["output_tokens"] / a["duration"] if a["duration"] > 0 else 0.0,
                      "acceptance": sum_acceptance(a["acc"])} for cat, a in out.items()}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # every round whole, its per-request lists included


@dataclass
class MatrixResult:
    plan: MatrixPlan
    cells: dict[tuple[str, int, float, int], Cell] = field(default_factory=dict)
    engine_starts: dict[str, float] = field(default_factory=dict)  # draft_name -> seconds
    time_split: dict[str, float] = field(default_factory=dict)  # this invocation's (time_split)
    complete: bool = False
    host: str = ""
    model: str = ""
    started: str = ""
    path: Path | None = None

    def baseline(self, temperature: float, concurrency: int) -> Cell | None:
        return self.cells.get((NONE, 0, temperature, concurrency))

    def speedup(self, cell: Cell) -> tuple[float | None, float | None, float | None]:
        """(speedup, lowest round, highest round) over the baseline cell of the same
        temperature and concurrency; None where there is no baseline yet."""
        base = self.baseline(cell.temperature, cell.concurrency)
        if base is None or not base.rounds:
            return None, None, None
        b = base.figures()["tok_s"]
        if b <= 0:
            return None, None, None
        f = cell.figures()
        rounds = [r / b for r in f["round_tok_s"]]
        return f["tok_s"] / b, min(rounds, default=None), max(rounds, default=None)

    def category_rows(self) -> list[tuple[Cell, dict[str, dict[str, Any]]]]:
        """Per cell of a draft, per prompt category: its speedup over the baseline's same
        category (same temperature and concurrency) and its acceptance length."""
        out = []
        for cell in self.cells.values():
            if cell.draft == NONE:
                continue
            cats = cell.categories()
            if not cats:
                continue
            base = self.baseline(cell.temperature, cell.concurrency)
            base_cats = base.categories() if base is not None else {}
            out.append((cell, {
                cat: {"speedup": f["tok_s"] / b["tok_s"]
                      if (b := base_cats.get(cat)) and b["tok_s"] > 0 else None,
                      "acceptance_length": (f["acceptance"] or {}).get("mean_length")}
                for cat, f in cats.items()}))
        return out

    def rows(self) -> list[dict[str, Any]]:
        """Every cell in plan order, with its figures and speedup: what tables and charts show."""
        out = []
        for draft, k in self.plan.servers():
            for key in self.plan.cell_keys(draft, k):
                cell = self.cells.get(key)
                if cell is None or not cell.rounds:
                    continue
                speedup, lo, hi = self.speedup(cell)
                out.append({"draft": draft, "k": k, "name": cell.name,
                            "temperature": cell.temperature, "concurrency": cell.concurrency,
                            **cell.figures(), "speedup": speedup, "speedup_min": lo,
                            "speedup_max": hi})
        return out

    def recommendations(self) -> list[str]:
        """One line per concurrency, `c=N: ...`: the (draft, K) with the best speedup (the
        geometric mean over the temperatures measured), then the best of every other draft
        in brackets; `none` when nothing beats the baseline."""
        lines = []
        rows = self.rows()
        for c in self.plan.concurrencies:
            by_server: dict[tuple[str, int], list[float]] = {}
            for r in rows:
                if r["concurrency"] == c and r["draft"] != NONE and r["speedup"]:
                    by_server.setdefault((r["draft"], r["k"]), []).append(r["speedup"])
            if not by_server:
                lines.append(f"c={c}: not measured")
                continue
            mean = {s: math.exp(sum(map(math.log, v)) / len(v)) for s, v in by_server.items()}
            ranked = sorted(mean.items(), key=lambda kv: -kv[1])
            (best, best_x) = ranked[0]
            others: dict[str, tuple[tuple[str, int], float]] = {}
            for s, x in ranked[1:]:
                if s[0] != best[0] and s[0] not in others:
                    others[s[0]] = (s, x)
            temps = ",".join(f"{t:g}" for t in self.plan.temperatures)
            rest = ", ".join(f"{draft_name(*s)} {x:.2f}x" for s, x in others.values())
            if best_x < 1.0:
                text = (f"c={c}: none (no speculation pays; best {draft_name(*best)} "
                        f"{best_x:.2f}x")
                text += f", {rest})" if rest else ")"
            else:
                text = f"c={c}: {draft_name(*best)} {best_x:.2f}x"
                text += f" ({rest})" if rest else ""
            lines.append(text + (f" [T={temps}]" if len(self.plan.temperatures) > 1 else ""))
        return lines

    def missing(self) -> list[tuple[str, int, float, int]]:
        return [key for d, k in self.plan.servers() for key in self.plan.cell_keys(d, k)
                if key not in self.cells]


def save_matrix(path: Path, m: MatrixResult) -> Path:
    """Written atomically, after every cell (complete=False until the last)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "version": VERSION, "complete": m.complete, "host": m.host,
           "model": m.model, "started": m.started, "plan": m.plan.to_dict(),
           "cells": [c.to_dict() for c in m.cells.values()],
           "engine_starts": m.engine_starts, "time_split": m.time_split,
           "recommendations": m.recommendations() if m.cells else []}
    tmp = path.with_name(f".{path.name}.part-{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_matrix(path: str | os.PathLike[str]) -> MatrixResult:
    p = Path(path).expanduser()
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ResultFileError(f"bench matrix {p}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError):
        raise ResultFileError(f"bench matrix {p}: not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ResultFileError(f"{p}: not a bench matrix (format is not {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise ResultFileError(f"bench matrix {p}: unsupported version {doc.get('version')!r}")
    try:
        plan = msgspec.convert(doc["plan"], MatrixPlan)
        cells = [Cell(str(c["draft"]), int(c["k"]), float(c["temperature"]),
                      int(c["concurrency"]), msgspec.convert(c["rounds"], list[Point]))
                 for c in doc.get("cells") or []]
    except (KeyError, TypeError, ValueError, msgspec.ValidationError) as exc:
        raise ResultFileError(f"bench matrix {p}: malformed ({exc})") from None
    return MatrixResult(plan, {c.key: c for c in cells},
                        engine_starts=dict(doc.get("engine_starts") or {}),
                        time_split=dict(doc.get("time_split") or {}),
                        complete=doc.get("complete") is True, host=str(doc.get("host", "")),
                        model=str(doc.get("model", "")), started=str(doc.get("started", "")),
                        path=p)


def estimate_seconds(plan: MatrixPlan, todo: list[tuple[str, int, float, int]], *,
                     start_s: float = GUESS_START_S,
                     tok_s_per_stream: float = GUESS_TOK_S_PER_STREAM) -> float:
    """Engine starts + measured windows for the cells still to measure, from the given rates
    (before anything is measured: the guesses above)."""
    servers = {(d, k) for d, k, _, _ in todo}
    window = sum(plan.cell_requests(c) * plan.max_tokens
                 / (tok_s_per_stream * c) for _, _, _, c in todo)
    return len(servers) * start_s + window
