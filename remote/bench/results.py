"""Benchmark results as data, and the JSON file they are kept in.

A result file holds one run (and, when it was measured in the same invocation, its baseline and
the comparison), so `console bench compare` can put two runs made at different times side by
side and check that they used the same prompts and output length.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import msgspec

from remote.bench import vllm_results
from remote.errors import ResultFileError
from remote.spine.sanitize import visible

FORMAT = "eagle3-console-bench"
VERSION = 1
# How TTFT, TPOT, ITL and E2E are taken (remote/bench/client.py, docs/measurements.md). A run
# without it was measured before #42: its TTFT started at the first chunk with text and its
# TPOT ran between the first and last chunks with text.
DEFINITIONS = "vllm-bench-serve-0.32"
# Requests per point when the operator names no rounds (remote/bench/driver.py): a median of a
# few dozen samples, where four made "p99" their maximum.
MIN_REQUESTS = 32
# A point's per-request lists (Point): in its result file, not in its events.
PER_REQUEST = ("ttfts", "latencies", "output_lens")


@dataclass
class Point:
    """One concurrency of a sweep. Times in seconds, rates per second."""

    concurrency: int
    requests: int
    failed: int
    output_tokens: int
    duration: float
    output_tok_s: float
    req_s: float
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p99: float | None
    acceptance: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)
    loop_lag_p99: float | None = None  # the load driver's own event-loop lag (driver.py)
    itl_p50: float | None = None  # absent from results written before #42
    itl_p99: float | None = None
    e2el_p50: float | None = None
    e2el_p99: float | None = None
    # Per request, in the order sent (None where a request failed), as `vllm bench serve
    # --save-detailed` keeps them: pairs request i with vLLM's request i over the same prompts
    # (tests/vllm_peer.py). Kept in result files only, not in every BENCH_POINT event.
    ttfts: list[float | None] | None = None
    latencies: list[float | None] | None = None
    output_lens: list[int] | None = None
    # Prompt category -> its own window's figures (driver.category_figures); None: the prompt
    # file names no categories (and every result written before #49)
    categories: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """As events carry it: without the per-request lists, which result files hold."""
        data = asdict(self)
        for name in PER_REQUEST:
            data.pop(name)
        return data


@dataclass
class BenchRun:
    label: str
    url: str
    model: str
    speculative: bool
    max_tokens: int
    rounds: int
    prompts: str
    prompts_sha256: str
    started: str
    host: str = ""
    server_version: str | None = None
    points: list[Point] = field(default_factory=list)
    warmup: int | None = None  # unmeasured requests before the first point (None: not recorded)
    min_requests: int | None = None  # per point, when no rounds were named
    min_seconds: float | None = None  # per point, at least this long
    definitions: str | None = None  # DEFINITIONS when measured so; None before #42
    source: str = FORMAT  # the file's writer: this console, or `vllm bench serve`
    temperature: float = 0.0  # results written before #49 were all greedy
    seed: int | None = None  # request i sampled with seed + i (temperature > 0 only)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # every point whole, its per-request lists included

    def point(self, concurrency: int) -> Point | None:
        return next((p for p in self.points if p.concurrency == concurrency), None)


def save_result(path: str | os.PathLike[str], run: BenchRun | None, *, baseline: BenchRun | None = None,
                comparison: dict[str, Any] | None = None, complete: bool = True,
                summary: dict[str, Any] | None = None) -> Path:
    """Written atomically: a crash mid-write never leaves half a result that compare would
    misread. Rewritten after every point (complete=False) so a sweep that fails or is
    interrupted half-way keeps the points it measured. `summary`: the bench.summary the run
    published, where it says more than the runs and comparison do (a served run's offline and
    served acceptance), so a console that reads the file back publishes the same one."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "complete": complete,
        "run": run.to_dict() if run else None,  # None: only the baseline was measured
        "baseline": baseline.to_dict() if baseline else None,
        "comparison": comparison,
    }
    if summary is not None:
        doc["summary"] = summary
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, dest)
    return dest


@dataclass
class ResultFile:
    path: Path
    run: BenchRun
    baseline: BenchRun | None
    comparison: dict[str, Any] | None
    complete: bool = True
    summary: dict[str, Any] | None = None  # the bench.summary as the run published it


# A result's text fields (label, model, prompts, ...) are shown in tables and recorded: a box
# may hand back 10 MB or an escape sequence there (issue 48 row 6).
TEXT_MAX = 200
_TEXTS = ("label", "url", "model", "prompts", "prompts_sha256", "started", "host",
          "server_version", "definitions", "source")
_COUNTS = ("concurrency", "requests", "failed", "output_tokens")


def _short(text: str) -> str:
    text = visible(text)
    return text if len(text) <= TEXT_MAX else f"{text[:TEXT_MAX]}... ({len(text)} characters)"


def _bad_number(v: object, *, count: bool = False) -> bool:
    return v is not None and (not vllm_results.finite_number(v) or (count and not isinstance(v, int)))


# A category's window in a point (driver.category_figures): its numbers, checked as a point's
_CATEGORY_NUMBERS = ("requests", "failed", "output_tokens", "duration", "output_tok_s", "tpot_p50")


def _good_acceptance(acc: object) -> bool:
    if not isinstance(acc, dict):
        return False
    per = acc.get("per_position") or []
    return isinstance(per, list) and not any(_bad_number(x) for x in per) and not any(
        _bad_number(acc.get(k)) for k in ("rate", "mean_length", "drafts", "draft_tokens",
                                          "accepted"))


def checked_run(run: BenchRun, where: str) -> BenchRun:
    """`run` with its text fields drawn safe and cut at TEXT_MAX, or ResultFileError in one
    line for a number that is not a finite count or rate (NaN throughput read as `speedup
    xnan ... speculation pays at every measured concurrency`) or an acceptance that is not
    numbers. Every result read from a file passes here, the console's own and vLLM's."""
    for name in _TEXTS:
        value = getattr(run, name)
        if value is not None:
            setattr(run, name, _short(str(value)))
    if _bad_number(run.max_tokens, count=True) or _bad_number(run.rounds, count=True):
        raise ResultFileError(f"{where}: max_tokens or rounds is not a count")
    for p in run.points:
        for f in fields(p):
            v = getattr(p, f.name)
            if f.name in PER_REQUEST or f.name in ("acceptance", "errors", "categories"):
                continue
            if _bad_number(v, count=f.name in _COUNTS) or (f.name == "concurrency" and v < 1):
                raise ResultFileError(f"{where}: the point at concurrency {str(p.concurrency)[:20]}"
                                      f" has {f.name} {str(v)[:40]!r}, not a finite number from 0")
        cats = p.categories
        if cats is not None and (not isinstance(cats, dict) or not all(
                isinstance(c, dict) and not any(_bad_number(c.get(k), count=k in _COUNTS)
                                                for k in _CATEGORY_NUMBERS)
                for c in cats.values())):
            raise ResultFileError(f"{where}: the point at concurrency {p.concurrency} has "
                                  "categories that are not finite numbers")
        for acc in [p.acceptance, *(c.get("acceptance") for c in (cats or {}).values())]:
            if acc is not None and not _good_acceptance(acc):
                raise ResultFileError(f"{where}: the point at concurrency {p.concurrency} has an "
                                      "acceptance that is not finite numbers")
        p.categories = {_short(str(k)): v for k, v in cats.items()} if cats else cats
        p.errors = [_short(str(e)) for e in p.errors[:20]]
    return run


def load_result(path: str | os.PathLike[str]) -> ResultFile:
    """The console's own result file, or one `vllm bench serve --save-result` wrote
    (remote/bench/vllm_results.py): either reads as a run."""
    p = Path(path).expanduser()
    try:
        docs = vllm_results.parse_objects(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ResultFileError(f"bench result {p}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ResultFileError(f"bench result {p}: not JSON (or nested too deep)") from None
    if docs and vllm_results.is_vllm_result(docs[0]):
        run = msgspec.convert(vllm_results.vllm_run(docs, p), BenchRun)
        return ResultFile(p, checked_run(run, f"bench result {p}"), None, None)
    doc = docs[0] if len(docs) == 1 else None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ResultFileError(f"bench result {p}: not a bench result (format is not {FORMAT!r}, "
                              "nor a `vllm bench serve --save-result` file)")
    if doc.get("version") != VERSION:
        raise ResultFileError(f"bench result {p}: unsupported version {doc.get('version')!r}")
    if doc.get("run") is None:
        raise ResultFileError(f"bench result {p}: incomplete, only its baseline was measured")
    try:
        # converted by the dataclasses' own types (msgspec): a field of the wrong type (an
        # output_tok_s of "x", an acceptance that is a list) is refused here, in one line,
        # not met later by compare or a report as a crash
        run = checked_run(msgspec.convert(doc["run"], BenchRun), f"bench result {p}")
        baseline = checked_run(msgspec.convert(doc["baseline"], BenchRun), f"bench result {p}") \
            if doc.get("baseline") else None
    except msgspec.ValidationError as exc:
        raise ResultFileError(f"bench result {p}: malformed run ({str(exc)[:300]})") from None
    comparison = doc.get("comparison") if isinstance(doc.get("comparison"), dict) else None
    summary = doc.get("summary") if isinstance(doc.get("summary"), dict) else None
    return ResultFile(p, run, baseline, comparison, complete=doc.get("complete", True) is not False,
                      summary=summary)
