"""evaluate through a running vLLM server that serves the target with the trained head.

Where the target cannot be loaded by transformers (a 1T-parameter target on 8 GPUs), the only
honest acceptance figure comes from vLLM itself: send the held-out prompts (greedy, the same
token ids and max_new_tokens as the offline evaluate), and read vLLM's spec-decode counters from
`/metrics` before and after. The figures are the window's differences under vLLM's definitions
(docs/design.md §2.7), so they match `console bench` on the same server.

Standard library only (urllib): the pipeline runs on the box with the container's Python, and
this path must not need torch or transformers at all.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import ServedError
from pipeline.regen_client import api_url, base_url

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
_FIELD = {DRAFTS: "drafts", DRAFT_TOKENS: "draft_tokens", ACCEPTED: "accepted"}  # of Counters
_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Counters:
    """One scrape's counters, summed over engines; `seen`: the text had any of them at all."""

    seen: bool = False
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)


def parse_counters(text: str, model: str | None = None) -> Counters:
    """The four spec-decode counters from Prometheus text, summed over engines; `model` keeps
    one model_name's series (None: all)."""
    c = Counters()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name = m.group(1).removesuffix("_total")
        if name not in (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS):
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        if model is not None and labels.get("model_name", model) != model:
            continue
        value = float(m.group(3))
        c.seen = True
        if name == PER_POS:
            pos = int(labels.get("position", "-1"))
            c.per_pos[pos] = c.per_pos.get(pos, 0.0) + value
        else:
            setattr(c, _FIELD[name], getattr(c, _FIELD[name]) + value)
    return c


def window(before: Counters, after: Counters, k: int) -> dict[str, Any]:
    drafts = after.drafts - before.drafts
    draft_tokens = after.draft_tokens - before.draft_tokens
    accepted = after.accepted - before.accepted
    if drafts < 0 or draft_tokens < 0 or accepted < 0:
        raise ServedError("the server's spec-decode counters went backwards during evaluate "
                          "(was it restarted?)")
    per_pos = [after.per_pos.get(i, 0.0) - before.per_pos.get(i, 0.0) for i in range(k)]
    return acceptance(int(drafts), int(draft_tokens), int(accepted), [int(x) for x in per_pos])


def acceptance(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int]
               ) -> dict[str, Any]:
    """vLLM's spec-decode counters and their ratios (design.md §2): the served window's and the
    offline evaluate's are one set of fields."""
    d = max(drafts, 1)
    return {"num_drafts": drafts, "num_draft_tokens": draft_tokens,
            "num_accepted_tokens": accepted, "accepted_per_pos": per_pos,
            "mean_length": 1 + accepted / d, "rate": accepted / max(draft_tokens, 1),
            "per_position": [x / d for x in per_pos]}


def _get(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return dict(json.loads(r.read()))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise ServedError(f"POST {url}: HTTP {exc.code}: {detail}") from None


def _model(base: str) -> str:
    try:
        data = json.loads(_get(api_url(base) + "/models", 30))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServedError(f"no vLLM server answers at {base} ({exc}): start the serve "
                          "step, or clear evaluate.served_url") from None
    models = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
    if not models:
        raise ServedError(f"{api_url(base)}/models lists no model")
    return str(models[0])


def _counters(base: str, model: str) -> Counters:
    try:
        text = _get(base + "/metrics", 30).decode()
    except (urllib.error.URLError, OSError) as exc:
        raise ServedError(f"cannot read {base}/metrics: {exc}") from None
    return parse_counters(text, model)


def _complete(base: str, model: str, prompt_ids: list[int], max_tokens: int) -> int:
    """Greedy completion of one token-id prompt; returns the generated token count."""
    out = _post(api_url(base) + "/completions",
                {"model": model, "prompt": prompt_ids, "max_tokens": max_tokens,
                 "temperature": 0.0, "ignore_eos": False}, 600.0)
    usage = out.get("usage") or {}
    return int(usage.get("completion_tokens", 0))


def measure(url: str, prompts: list[list[int]], k: int, max_new_tokens: int,
            concurrency: int = 4, on_prompt: Any = None) -> dict[str, Any]:
    """Acceptance of the served head on these prompts, from the counters' window."""
    base = base_url(url)  # served_url written with or without /v1
    model = _model(base)
    before = _counters(base, model)
    if not before.seen:
        raise ServedError(f"{base}/metrics has no spec-decode counters ({DRAFTS}): the server "
                          "is not speculating; start it with the pipeline's "
                          "speculative_config.json")
    generated = 0
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for n in pool.map(lambda p: _complete(base, model, p, max_new_tokens), prompts):
            generated += n
            if on_prompt is not None:
                on_prompt()
    after = _counters(base, model)
    result = window(before, after, k)
    if result["num_drafts"] == 0:
        raise ServedError(f"{url} generated {generated} tokens but drafted nothing: is it "
                          "serving with the head (--speculative-config)?")
    return {**result, "generated_tokens": generated, "served_model": model, "url": url}
