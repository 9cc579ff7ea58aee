"""vLLM's spec-decode counters, read from /metrics, and the acceptance figures of a window.

The figures are vLLM's own definitions (vllm/v1/spec_decode/metrics.py, docs/design.md §2.7) applied to
the difference of two scrapes, so they agree with what the server logs for the same window:
acceptance rate = accepted / draft_tokens, mean acceptance length = 1 + accepted / drafts,
per-position i = accepted_per_pos[i] / drafts. Counters are summed over engines (data-parallel
ranks) and filtered by model_name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import zip_longest
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from remote.errors import CountersReset, MetricsMalformed, ModelMismatch, NoSpeculation

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
SPEC_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POS)
MODEL_LABEL = "model_name"
ENGINE_LABEL = "engine"
POSITION_LABEL = "position"


@dataclass
class SpecCounters:
    """The four counters of one model at one scrape, summed over engines."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    # Series creation times (prometheus_client's `_created`), keyed by series: a change means the
    # server was restarted even when the counters have already grown past their old values.
    created: dict[str, float] = field(default_factory=dict)
    engines: set[str] = field(default_factory=set)


@dataclass
class SpecScrape:
    """Every model's spec-decode counters from one /metrics text."""

    by_model: dict[str, SpecCounters]

    @property
    def models(self) -> list[str]:
        return sorted(self.by_model)

    def for_model(self, model: str | None, url: str = "the server") -> SpecCounters:
        """The counters of `model` (None: the only model present); clear errors otherwise."""
        if not self.by_model:
            raise NoSpeculation(
                f"{url} exposes no spec-decode counters ({DRAFTS}_total ...): "
                "is vLLM running without --speculative-config (or with --disable-log-stats)?"
            )
        if model is None:
            if len(self.by_model) > 1:
                raise ModelMismatch(
                    f"{url} reports spec-decode counters for several models "
                    f"({', '.join(self.models)}): name one with --model"
                )
            return next(iter(self.by_model.values()))
        if model not in self.by_model:
            raise ModelMismatch(
                f"{url} reports spec-decode counters for model_name "
                f"{', '.join(repr(m) for m in self.models)}, not {model!r}"
            )
        return self.by_model[model]


def parse_spec_counters(text: str, url: str = "the server") -> SpecScrape:
    """Parse Prometheus text with prometheus_client's parser and keep the four counters.

    Both exposition spellings are accepted: `NAME_total` samples (what prometheus_client writes
    for a Counter) and a bare `NAME` sample of an untyped family.

    Only the four families' lines reach the parser (_spec_lines): a bench scrapes before and after
    every window, and the whole text of vLLM 0.32's /metrics (627 lines, mostly histograms, 61 KB
    with one model) cost 11 ms of CPU per parse, most of the bench client's CPU per request: on
    shared cores a client that burns more CPU waits longer for one when the server answers
    (docs/measurements.md, #49's TTFT p99). vLLM's own client filters lines the same way."""
    wanted = {f"{n}_total": n for n in SPEC_COUNTERS} | {n: n for n in SPEC_COUNTERS}
    created_names = {f"{n}_created": n for n in SPEC_COUNTERS}
    by_model: dict[str, SpecCounters] = {}
    try:
        for family in text_string_to_metric_families(_spec_lines(text)):
            for sample in family.samples:
                name = sample.name
                if name not in wanted and name not in created_names:
                    continue
                labels = sample.labels
                model = labels.get(MODEL_LABEL, "")
                counters = by_model.setdefault(model, SpecCounters())
                counters.engines.add(labels.get(ENGINE_LABEL, ""))
                if name in created_names:
                    key = created_names[name] + _series_key(labels)
                    counters.created[key] = float(sample.value)
                    continue
                _add(counters, wanted[name], labels, float(sample.value), url)
    except ValueError as exc:
        raise MetricsMalformed(f"{url}/metrics is not Prometheus text: {exc}") from None
    return SpecScrape(by_model)


_FAMILY_PREFIX = "vllm:spec_decode_num_"  # what the four names share
assert all(n.startswith(_FAMILY_PREFIX) for n in SPEC_COUNTERS)


def _spec_lines(text: str) -> str:
    """The lines of the four counter families: their samples and their `# HELP` / `# TYPE`
    lines (a line of another family is never one of ours, so the parse keeps exactly what it
    kept). Found with str.find on the names' common prefix: a Python loop over every line of
    the text cost 1 ms, a MULTILINE regex 1.5 ms."""
    keep = []
    at = text.find(_FAMILY_PREFIX)
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        line = text[start:end]
        head = line[: at - start]  # "" for a sample, "# HELP " / "# TYPE " for a comment
        if head in ("", "# HELP ", "# TYPE ") and line[at - start:].startswith(SPEC_COUNTERS):
            keep.append(line)
        at = text.find(_FAMILY_PREFIX, end)
    return "\n".join(keep) + "\n"


def _series_key(labels: dict[str, str]) -> str:
    return "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"


def _add(counters: SpecCounters, metric: str, labels: dict[str, str], value: float,
         url: str) -> None:
    if metric == DRAFTS:
        counters.drafts += value
    elif metric == DRAFT_TOKENS:
        counters.draft_tokens += value
    elif metric == ACCEPTED:
        counters.accepted += value
    else:
        raw = labels.get(POSITION_LABEL)
        try:
            pos = int(raw) if raw is not None else -1
        except ValueError:
            pos = -1
        if pos < 0:
            raise MetricsMalformed(
                f"{url}/metrics: {ACCEPTED_PER_POS} sample without a valid position label "
                f"({raw!r})"
            )
        counters.accepted_per_pos[pos] = counters.accepted_per_pos.get(pos, 0.0) + value


@dataclass(frozen=True)
class Acceptance:
    """Acceptance over one window, with the raw deltas it was computed from (fields in the
    order to_dict writes them)."""

    rate: float | None  # None: no drafts in the window (nothing was decoded)
    mean_length: float | None
    per_position: list[float | None]
    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_pos: list[float]

    @classmethod
    def of(cls, drafts: float, draft_tokens: float, accepted: float,
           accepted_per_pos: list[float]) -> Acceptance:
        """The figures of these deltas by vLLM's definitions."""
        return cls(rate=accepted / draft_tokens if draft_tokens > 0 else None,
                   mean_length=1.0 + accepted / drafts if drafts > 0 else None,
                   per_position=[(d / drafts if drafts > 0 else None) for d in accepted_per_pos],
                   drafts=drafts, draft_tokens=draft_tokens, accepted=accepted,
                   accepted_per_pos=accepted_per_pos)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def short(self) -> str:
        if self.rate is None or self.mean_length is None:
            return "no drafts in window"
        pos = " ".join(f"{p:.2f}" for p in self.per_position if p is not None)
        return f"acceptance {self.rate:.1%}, mean length {self.mean_length:.2f}, per position {pos}"


def acceptance_between(before: SpecCounters, after: SpecCounters,
                       url: str = "the server") -> Acceptance:
    """vLLM's figures over the window between two scrapes of the same model."""
    for key, created in before.created.items():
        if key in after.created and after.created[key] != created:
            raise CountersReset(
                f"{url}: spec-decode counters were re-created between scrapes "
                "(server restarted): rerun the measurement"
            )
    positions = sorted(set(before.accepted_per_pos) | set(after.accepted_per_pos))
    n_pos = positions[-1] + 1 if positions else 0
    d_drafts = after.drafts - before.drafts
    d_draft_tokens = after.draft_tokens - before.draft_tokens
    d_accepted = after.accepted - before.accepted
    d_pos = [after.accepted_per_pos.get(i, 0.0) - before.accepted_per_pos.get(i, 0.0)
             for i in range(n_pos)]
    if min([d_drafts, d_draft_tokens, d_accepted, *d_pos]) < 0:
        raise CountersReset(
            f"{url}: spec-decode counters went backwards between scrapes "
            "(server restarted): rerun the measurement"
        )
    return Acceptance.of(d_drafts, d_draft_tokens, d_accepted, d_pos)


def sum_acceptance(windows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Several windows' acceptance (their to_dict) as one window: the raw deltas added, the
    figures recomputed by vLLM's definitions (acceptance_between), never averaged: a window
    with few drafts weighs what its drafts weigh. None when no window had a figure."""
    windows = [w for w in windows if w]
    if not windows:
        return None
    drafts = sum(float(w.get("drafts") or 0) for w in windows)
    draft_tokens = sum(float(w.get("draft_tokens") or 0) for w in windows)
    accepted = sum(float(w.get("accepted") or 0) for w in windows)
    per_pos = [sum(map(float, column)) for column in
               zip_longest(*(w.get("accepted_per_pos") or [] for w in windows), fillvalue=0)]
    return Acceptance.of(drafts, draft_tokens, accepted, per_pos).to_dict()
