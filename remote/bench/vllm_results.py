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
from pathlib import Path
from typing import Any

from remote.bench.results import BenchRun, Point
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


def _s(doc: dict[str, Any], key: str) -> float | None:
    """A time in ms as seconds (the console's unit), None where vLLM did not report it."""
    v = doc.get(key)
    return float(v) / 1000.0 if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _num(doc: dict[str, Any], key: str, where: str) -> float:
    v = doc.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise ResultFileError(f"{where}: vLLM result without a number for {key!r}")
    return float(v)


def _acceptance(doc: dict[str, Any]) -> dict[str, Any] | None:
    if "spec_decode_num_drafts" not in doc:
        return None
    rate = doc.get("spec_decode_acceptance_rate")
    per = doc.get("spec_decode_per_position_acceptance_rates") or []
    drafts = doc.get("spec_decode_num_drafts") or 0
    return {
        "rate": float(rate) / 100.0 if isinstance(rate, (int, float)) else None,
        "mean_length": doc.get("spec_decode_acceptance_length"),
        "per_position": [float(p) for p in per if isinstance(p, (int, float))],
        "drafts": drafts,
        "draft_tokens": doc.get("spec_decode_draft_tokens"),
        "accepted": doc.get("spec_decode_accepted_tokens"),
        "accepted_per_pos": [round(float(p) * drafts) for p in per
                             if isinstance(p, (int, float))],
    }


def vllm_point(doc: dict[str, Any], where: str) -> Point:
    conc = doc.get("max_concurrency")
    if not isinstance(conc, int) or conc < 1:
        raise ResultFileError(f"{where}: a vLLM result without --max-concurrency (an open-loop "
                              "run at a request rate) has no concurrency to compare at")
    completed = int(_num(doc, "completed", where))
    failed = int(doc.get("failed") or 0)
    return Point(
        concurrency=conc,
        requests=completed + failed,
        failed=failed,
        output_tokens=int(_num(doc, "total_output_tokens", where)),
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
        acceptance=_acceptance(doc),
    )


def vllm_run(docs: list[Any], path: Path) -> BenchRun:
    """The objects of one vLLM result file as one run, a point per object."""
    where = f"bench result {path}"
    if not docs or not all(is_vllm_result(d) for d in docs):
        raise ResultFileError(f"{where}: not a `vllm bench serve --save-result` file")
    models = {str(d.get("model_id")) for d in docs}
    if len(models) != 1:
        raise ResultFileError(f"{where}: its runs name several models ({', '.join(sorted(models))})")
    points = sorted((vllm_point(d, where) for d in docs), key=lambda p: p.concurrency)
    seen = [p.concurrency for p in points]
    if len(set(seen)) != len(seen):
        raise ResultFileError(f"{where}: several runs at the same --max-concurrency {seen}")
    first = docs[0]
    max_tokens = first.get("max_tokens")  # only as --metadata max_tokens=N
    if not isinstance(max_tokens, (int, str)) or not str(max_tokens).isdigit():
        done = sum(p.requests - p.failed for p in points)
        max_tokens = round(sum(p.output_tokens for p in points) / done) if done else 0
    return BenchRun(
        label=str(first.get("label") or first.get("backend") or "vllm"),
        url="",
        model=str(first.get("model_id")),
        speculative=any(p.acceptance is not None for p in points),
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
