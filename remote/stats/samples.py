"""A sampler line as a `stats.sample` payload, the bounded history the TUI draws sparklines
from, and the one-line text the printer shows for a sample. No I/O: the stream
(remote/stats/stream.py) feeds it, the printer and the TUI read it."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

HOST_FIELDS = ("cpu", "mem_used", "mem_total", "load1")
GPU_FIELDS = ("util", "mem_used", "mem_total", "power", "power_limit", "temp", "sm_clock",
              "pcie_tx", "pcie_rx")
# Per-metric series kept for sparklines: 10 minutes at 1 Hz, one minute at 10 Hz.
DEFAULT_HISTORY = 600
# Metric names are built from GPU indices the box reports; cap them so a confused sampler
# cannot grow memory through names either.
MAX_METRICS = 1024


@dataclass
class History:
    """Bounded series per metric: memory stays flat however long the session runs."""

    maxlen: int = DEFAULT_HISTORY
    max_metrics: int = MAX_METRICS
    series: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)
    dropped_metrics: int = 0

    def add(self, payload: dict[str, Any]) -> None:
        t = float(payload.get("t") or 0.0)
        for name, value in metric_values(payload):
            s = self.series.get(name)
            if s is None:
                if len(self.series) >= self.max_metrics:
                    self.dropped_metrics += 1
                    continue
                s = self.series[name] = deque(maxlen=self.maxlen)
            s.append((t, value))

    def values(self, metric: str) -> list[float]:
        return [v for _, v in self.series.get(metric, ())]

    def points(self) -> int:
        return sum(len(s) for s in self.series.values())


def metric_values(payload: dict[str, Any]) -> Iterable[tuple[str, float]]:
    host = payload.get("host") or {}
    for key in HOST_FIELDS:
        v = host.get(key)
        if isinstance(v, (int, float)):
            yield f"host.{key}", float(v)
    for gpu in payload.get("gpus") or ():
        idx = gpu.get("index")
        for key in GPU_FIELDS:
            v = gpu.get(key)
            if isinstance(v, (int, float)):
                yield f"gpu{idx}.{key}", float(v)


# --------------------------------------------------------------------------- sampler lines


def _number_or_none(v: Any, what: str) -> float | int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{what} is not a number: {v!r}")
    return v


def sample_payload(obj: dict[str, Any], *, reason: str | None = None) -> dict[str, Any]:
    """A sampler `sample` line as a stats.sample payload (design: brief's payload shape).
    Raises ValueError naming the first thing that is not in the documented shape."""
    host = obj.get("host")
    if not isinstance(host, dict):
        raise ValueError("sample has no host object")
    host_out = {k: _number_or_none(host.get(k), f"host.{k}") for k in HOST_FIELDS}
    gpus = obj.get("gpus", [])
    if not isinstance(gpus, list):
        raise ValueError("sample gpus is not a list")
    gpus_out = []
    for g in gpus:
        if not isinstance(g, dict) or not isinstance(g.get("index"), int):
            raise ValueError(f"gpu entry without an integer index: {str(g)[:80]}")
        entry: dict[str, Any] = {"index": g["index"], "name": str(g.get("name", ""))}
        for k in GPU_FIELDS:
            entry[k] = _number_or_none(g.get(k), f"gpu{g['index']}.{k}")
        procs = g.get("procs", [])
        entry["procs"] = procs if isinstance(procs, list) else []
        gpus_out.append(entry)
    source = obj.get("source", "none")
    if source not in ("nvml", "nvidia-smi", "none"):
        raise ValueError(f"unknown source {source!r}")
    payload: dict[str, Any] = {"source": source, "host": host_out, "gpus": gpus_out}
    if reason and source != "nvml":
        payload["reason"] = reason
    for k in ("seq", "t", "self_cpu"):
        if isinstance(obj.get(k), (int, float)):
            payload[k] = obj[k]
    return payload


def _gib(v: float | None) -> str:
    return "-" if v is None else f"{v / 2**30:.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def summary_line(payload: dict[str, Any]) -> str:
    """One compact line per sample for the headless printer."""
    h = payload.get("host", {})
    load = h.get("load1")
    parts = [f"cpu {_pct(h.get('cpu'))} mem {_gib(h.get('mem_used'))}/{_gib(h.get('mem_total'))} GiB"
             f" load {'-' if load is None else f'{load:.2f}'}"]
    for g in payload.get("gpus", []):
        power = g.get("power")
        temp = g.get("temp")
        parts.append(
            f"gpu{g['index']} {_pct(g.get('util'))} {_gib(g.get('mem_used'))}/"
            f"{_gib(g.get('mem_total'))}G {'-' if power is None else f'{power:.0f}'}W "
            f"{'-' if temp is None else f'{temp:.0f}'}C"
        )
    if not payload.get("gpus"):
        parts.append(f"no GPU ({payload.get('source', 'none')})")
    return " | ".join(parts)


# -------------------------------------------------------------------------------------- stream
