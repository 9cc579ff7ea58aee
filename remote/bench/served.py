"""Served acceptance over a whole sweep, and the offline estimate beside it.

Each point of a sweep carries vLLM's counter deltas for its own window; their sums are the
counters of the whole sweep, from which the figures are recomputed with vLLM's definitions
(averaging per-point rates would weight a 4-request point like a 64-request one). The offline
estimate is the pipeline's evaluate output (evaluate/acceptance.json, the trained head), counted
the same way, so the two numbers answer the same question: how many tokens per target step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from remote.bench.metrics import sum_acceptance
from remote.bench.results import Point


def sweep_acceptance(points: Iterable[Point]) -> dict[str, Any] | None:
    """vLLM's figures over every point's window together; None without any drafts."""
    acc = sum_acceptance([p.acceptance for p in points if p.acceptance])
    return acc if acc and acc["drafts"] > 0 else None


def offline_vs_served(offline: Mapping[str, Any] | None,
                      served: Mapping[str, Any] | None) -> str:
    """One line: the offline estimate and the served figure, with their per-position rows."""
    def pos(values: Any) -> str:
        return " ".join(f"{float(v):.2f}" for v in values or [])

    parts = []
    if offline is not None:
        parts.append(f"offline {float(offline['mean_length']):.2f} "
                     f"(per position {pos(offline.get('per_position'))})")
    else:
        parts.append("offline n/a")
    if served is not None:
        rate = served.get("rate")
        rate_s = f", acceptance rate {rate:.1%}" if rate is not None else ""
        parts.append(f"served {float(served['mean_length']):.2f} (per position "
                     f"{pos(served.get('per_position'))}{rate_s}; {served['drafts']:.0f} drafts)")
    else:
        parts.append("served n/a (no drafts counted)")
    return "mean acceptance length: " + " vs ".join(parts)
