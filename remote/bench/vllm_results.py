"""Result files written by `vllm bench serve --save-result` (or `--append-result`), read as the
console's own runs, so a user's existing vLLM runs sit in the same table and chart.

What vLLM 0.32 writes (vllm/benchmarks/serve.py, `main_async` and `benchmark`): one JSON
object per run, several separated by newlines with --append-result; times in milliseconds
(`median_ttft_ms`, `p99_tpot_ms`, ... for the metrics in --percentile-metrics, default
ttft,tpot,itl), `output_throughput` (tok/s), `request_throughput`, `completed`, `failed`,
`total_output_tokens`, `duration`, `max_concurrency` (None for an open-loop run) and, with a
speculating server, `spec_decode_*` from the same /metrics counters the console scrapes
(`spec_decode_acceptance_rate` in percent, `spec_decode_acceptance_length` = 1 + accepted /
drafts, per-position rates over drafts). Each object becomes one point of a run at its
`max_concurrency`; a file's objects must share the model. The output length is not recorded
by vLLM (unless passed as `--metadata max_tokens=N`): the mean output length stands in, and
the prompt set is unknown (compare says so).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TypeGuard

from remote.errors import ResultFileError

SOURCE = "vllm bench serve"
# A vLLM result object has these (serve.py writes them for every generative run).
MARKERS = ("backend", "output_throughput", "completed")


def is_vllm_result(doc: object) -> bool:
    return isinstance(doc, dict) and all(k in doc for k in MARKERS)


def parse_objects(text: str) -> list[Any]:
    """One JSON value, or several written one after another (--append-result puts a newline
    between them)."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return values
        value, pos = decoder.raw_decode(text, pos)
        values.append(value)


# The largest count a result may hold (requests, tokens, drafts): far above any real run, far
# below what int() of a float or a 5,000-digit number does to the code after it.
MAX_COUNT = 10**15


def finite_number(v: object) -> TypeGuard[int | float]:
    """A real, finite, non-negative number (not a bool: JSON's true is not 1 request)."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and
            (not isinstance(v, float) or math.isfinite(v)) and 0 <= v <= MAX_COUNT)


def _s(doc: dict[str, Any], key: str) -> float | None:
    """A time in ms as seconds (the console's unit), None where vLLM did not report it (or
    reported something that is no time: NaN, inf, a negative, a string)."""
    v = doc.get(key)
    return float(v) / 1000.0 if finite_number(v) else None


def _num(doc: dict[str, Any], key: str, where: str) -> float:
    v = doc.get(key)
    if not finite_number(v):
        raise ResultFileError(f"{where}: vLLM result without a number for {key!r} (a finite "
                              f"number from 0 to {MAX_COUNT}; it holds {str(v)[:40]!r})")
    return float(v)


def _count(doc: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    v = doc.get(key)
    v = default if v is None else v
    if not finite_number(v) or float(v) != int(v):
        raise ResultFileError(f"{where}: vLLM result whose {key!r} is {str(v)[:40]!r}, not a "
                              f"count from 0 to {MAX_COUNT}")
    return int(v)


def _acceptance(doc: dict[str, Any], where: str) -> dict[str, Any] | None:
    if "spec_decode_num_drafts" not in doc:
        return None
    rate = doc.get("spec_decode_acceptance_rate")
    per = doc.get("spec_decode_per_position_acceptance_rates") or []
    if not isinstance(per, list) or not all(finite_number(p) and p <= 1 for p in per):
        raise ResultFileError(f"{where}: vLLM result whose per-position acceptance rates are not "
                              "a list of rates from 0 to 1")
    drafts = _count(doc, "spec_decode_num_drafts", where, 0)
    length = doc.get("spec_decode_acceptance_length")
    return {
        "rate": float(rate) / 100.0 if finite_number(rate) else None,
        "mean_length": float(length) if finite_number(length) else None,
        "per_position": [float(p) for p in per],
        "drafts": drafts,
        "draft_tokens": doc.get("spec_decode_draft_tokens")
        if finite_number(doc.get("spec_decode_draft_tokens")) else None,
        "accepted": doc.get("spec_decode_accepted_tokens")
        if finite_number(doc.get("spec_decode_accepted_tokens")) else None,
        "accepted_per_pos": [round(float(p) * drafts) for p in per],
    }


def vllm_point(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """One vLLM result object as a point (the fields of remote/bench/results.py Point);
    ResultFileError (one line) for any field that is not
    what vLLM writes: a result handed back by a box is untrusted input (issue 48 row 6)."""
    conc = doc.get("max_concurrency")
    if not isinstance(conc, int) or isinstance(conc, bool) or not 1 <= conc <= 1_000_000:
        raise ResultFileError(f"{where}: a vLLM result without --max-concurrency (an open-loop "
                              "run at a request rate) has no concurrency to compare at")
    completed = _count(doc, "completed", where)
    failed = _count(doc, "failed", where, 0)
    return dict(
        concurrency=conc,
        requests=completed + failed,
        failed=failed,
        output_tokens=_count(doc, "total_output_tokens", where),
        duration=_num(doc, "duration", where),
        output_tok_s=_num(doc, "output_throughput", where),
        req_s=_num(doc, "request_throughput", where),
        ttft_p50=_s(doc, "median_ttft_ms"),
        ttft_p99=_s(doc, "p99_ttft_ms"),
        tpot_p50=_s(doc, "median_tpot_ms"),
        tpot_p99=_s(doc, "p99_tpot_ms"),
        itl_p50=_s(doc, "median_itl_ms"),
        itl_p99=_s(doc, "p99_itl_ms"),
        e2el_p50=_s(doc, "median_e2el_ms"),
        e2el_p99=_s(doc, "p99_e2el_ms"),
        acceptance=_acceptance(doc, where),
    )


def vllm_run(docs: list[Any], path: Path) -> dict[str, Any]:
    """The objects of one vLLM result file as one run, a point per object: the fields of
    remote/bench/results.py BenchRun, which load_result converts and checks as it does the
    console's own (this module does not import it: results.py reads both formats)."""
    where = f"bench result {path}"
    if not docs or not all(is_vllm_result(d) for d in docs):
        raise ResultFileError(f"{where}: not a `vllm bench serve --save-result` file")
    models = {str(d.get("model_id")) for d in docs}
    if len(models) != 1:
        raise ResultFileError(f"{where}: its runs name several models ({len(models)})")
    points = sorted((vllm_point(d, where) for d in docs), key=lambda p: p["concurrency"])
    seen = [p["concurrency"] for p in points]
    if len(set(seen)) != len(seen):
        raise ResultFileError(f"{where}: several runs at the same --max-concurrency {seen}")
    first = docs[0]
    max_tokens = first.get("max_tokens")  # only as --metadata max_tokens=N
    if isinstance(max_tokens, str) and max_tokens.isdigit() and len(max_tokens) <= 12:
        max_tokens = int(max_tokens)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) \
            or not 0 <= max_tokens <= 10**12:
        done = sum(p["requests"] - p["failed"] for p in points)
        max_tokens = round(sum(p["output_tokens"] for p in points) / done) if done else 0
    return dict(
        label=str(first.get("label") or first.get("backend") or "vllm"),
        url="",
        model=str(first.get("model_id")),
        speculative=any(p["acceptance"] is not None for p in points),
        max_tokens=int(max_tokens),
        rounds=0,
        prompts=str(first.get("dataset") or "unknown (vllm bench serve does not record it)"),
        prompts_sha256="",
        started=str(first.get("date") or ""),
        points=points,
        warmup=None,
        definitions=SOURCE,  # vLLM's own, which the console's follow since #42 (client.py)
        source=SOURCE,
    )
