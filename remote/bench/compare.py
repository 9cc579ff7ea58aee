"""Baseline vs speculative: speedup per concurrency and where speculation stops paying.

Speedup is the ratio of output tokens/s at the same concurrency (same prompts, same fixed
output length). Speculation pays at low concurrency (idle compute verifies drafted tokens for
free) and costs at high concurrency (the batch is compute-bound and rejected drafts are waste),
so the interesting number is the crossover: the lowest measured concurrency at which the speedup
drops below 1, with an estimate interpolated on log2(concurrency) between it and the last point
that still paid.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from remote.bench.results import BenchRun


@dataclass
class CompareRow:
    concurrency: int
    baseline_tok_s: float
    spec_tok_s: float
    speedup: float | None
    baseline_tpot_p50: float | None
    spec_tpot_p50: float | None
    acceptance_rate: float | None
    mean_length: float | None
    # prompt category -> speedup and acceptance of its own windows (both runs measured by
    # category); None otherwise
    categories: dict[str, dict[str, Any]] | None = None


@dataclass
class Comparison:
    baseline_label: str
    spec_label: str
    rows: list[CompareRow]
    crossover: int | None  # lowest measured concurrency with speedup < 1
    last_paying: int | None  # the measured concurrency before it (speedup >= 1)
    crossover_estimate: float | None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Comparison:
        """A comparison as to_dict wrote it (a result file's `comparison`)."""
        fields = CompareRow.__dataclass_fields__
        rows = [CompareRow(**{k: r.get(k) for k in fields})  # type: ignore[arg-type]
                for r in data.get("rows") or [] if isinstance(r, dict)]
        return cls(str(data.get("baseline_label", "")), str(data.get("spec_label", "")), rows,
                   data.get("crossover"), data.get("last_paying"),
                   data.get("crossover_estimate"), list(data.get("warnings") or []))

    def summary(self) -> str:
        parts = [
            f"x{r.speedup:.2f} at c={r.concurrency}" for r in self.rows if r.speedup is not None
        ]
        text = "speedup " + ", ".join(parts) if parts else "no common concurrency"
        if self.crossover is None:
            if self.rows:
                text += "; speculation pays at every measured concurrency"
        elif self.last_paying is None:
            text += f"; speculation does not pay even at c={self.crossover}"
        else:
            est = f" (≈{self.crossover_estimate:.1f})" if self.crossover_estimate else ""
            text += f"; speculation stops paying at c={self.crossover}{est}"
        return text


def compare_runs(baseline: BenchRun, spec: BenchRun) -> Comparison:
    warnings: list[str] = []
    if baseline.max_tokens != spec.max_tokens:
        warnings.append(
            f"output lengths differ (baseline {baseline.max_tokens}, "
            f"speculative {spec.max_tokens}): tokens/s are not comparable"
        )
    unknown = [r.label for r in (baseline, spec) if not r.prompts_sha256]
    if unknown:  # a `vllm bench serve` result records neither its prompts nor their digest
        warnings.append(
            f"the prompts of {' and '.join(repr(u) for u in unknown)} are not recorded "
            "(vllm bench serve): check that both runs used the same prompt set"
        )
    elif baseline.prompts_sha256 != spec.prompts_sha256:
        warnings.append(
            f"prompt sets differ ({baseline.prompts} vs {spec.prompts}): the comparison mixes "
            "workloads"
        )
    if baseline.temperature != spec.temperature or baseline.seed != spec.seed:
        warnings.append(
            f"sampling differs (baseline temperature {baseline.temperature:g} seed "
            f"{baseline.seed}, speculative temperature {spec.temperature:g} seed {spec.seed}): "
            "the two runs decoded different text"
        )
    if baseline.speculative:
        warnings.append(f"the baseline run {baseline.label!r} was itself speculative")
    base_cs = {p.concurrency for p in baseline.points}
    spec_cs = {p.concurrency for p in spec.points}
    if base_cs != spec_cs:
        only = sorted(base_cs ^ spec_cs)
        warnings.append(f"concurrencies measured in only one run are left out: {only}")
    rows: list[CompareRow] = []
    for c in sorted(base_cs & spec_cs):
        b = baseline.point(c)
        s = spec.point(c)
        assert b is not None and s is not None
        acc = s.acceptance or {}
        rows.append(CompareRow(
            concurrency=c,
            baseline_tok_s=b.output_tok_s,
            spec_tok_s=s.output_tok_s,
            speedup=s.output_tok_s / b.output_tok_s if b.output_tok_s > 0 else None,
            baseline_tpot_p50=b.tpot_p50,
            spec_tpot_p50=s.tpot_p50,
            acceptance_rate=acc.get("rate"),
            mean_length=acc.get("mean_length"),
            categories=category_speedups(b.categories, s.categories),
        ))
    crossover, last_paying, estimate = find_crossover(
        [(r.concurrency, r.speedup) for r in rows if r.speedup is not None]
    )
    return Comparison(baseline.label, spec.label, rows, crossover, last_paying, estimate,
                      warnings)


def category_speedups(base: dict[str, dict[str, Any]] | None,
                      spec: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
    """Per prompt category: the speculative window's tokens/s over the baseline's for the same
    category, and its acceptance. A category only one run measured has no speedup."""
    if not spec:
        return None
    rows: dict[str, dict[str, Any]] = {}
    for cat, fig in spec.items():
        b = (base or {}).get(cat) or {}
        acc = fig.get("acceptance") or {}
        b_tok = b.get("output_tok_s")
        s_tok = fig.get("output_tok_s")
        rows[cat] = {"baseline_tok_s": b_tok, "spec_tok_s": s_tok,
                     "speedup": s_tok / b_tok if b_tok and s_tok is not None else None,
                     "acceptance_rate": acc.get("rate"), "mean_length": acc.get("mean_length")}
    return rows


def find_crossover(
    points: list[tuple[int, float]],
) -> tuple[int | None, int | None, float | None]:
    """(crossover, last paying concurrency, interpolated estimate) from (concurrency, speedup)."""
    previous: tuple[int, float] | None = None
    for c, s in sorted(points):
        if s < 1.0:
            if previous is None:
                return c, None, None
            pc, ps = previous
            x0, x1 = math.log2(pc), math.log2(c)
            frac = (ps - 1.0) / (ps - s) if ps != s else 0.0
            return c, pc, 2 ** (x0 + frac * (x1 - x0))
        previous = (c, s)
    return None, None, None
