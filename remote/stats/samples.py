"""A sampler line as a `stats.sample` payload, and the one-line text the printer shows for a
sample. No I/O: the stream (remote/stats/stream.py) feeds it, the printer reads it. The TUI
keeps its sparklines' history from the stats.sample events themselves (console/tui/reducers.py),
so a replayed session draws the same."""

from __future__ import annotations

import math
from typing import Any

from pipeline.units import fmt_bytes

HOST_FIELDS = ("cpu", "mem_used", "mem_total", "load1")
GPU_FIELDS = ("util", "mem_used", "mem_total", "power", "power_limit", "temp", "sm_clock",
              "pcie_tx", "pcie_rx")
# The health fields (remote/probes/gpu_health.py): counters, present only when the box's driver
# answers them. A field the driver lacks stays absent here too (never 0): an alert or an
# exporter must not read a missing ECC counter as "no errors".
HEALTH_COUNTERS = (
    "clock_reasons_mask",
    "ecc_corrected_volatile", "ecc_uncorrected_volatile",
    "ecc_corrected_aggregate", "ecc_uncorrected_aggregate",
    "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending",
    "remapped_rows_corrected", "remapped_rows_uncorrected", "remapped_rows_pending",
    "remapped_rows_failure", "pcie_replay",
)
NVLINK_FIELDS = ("tx", "rx", "replay_errors", "recovery_errors", "crc_flit_errors", "crc_data_errors")


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
        entry.update(health_fields(g))
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


def health_fields(g: dict[str, Any]) -> dict[str, Any]:
    """The health fields a sampler GPU entry carries, checked; those it lacks stay absent.
    A sampler from an earlier release sends none of them."""
    what = f"gpu{g['index']}"
    out: dict[str, Any] = {}
    for k in HEALTH_COUNTERS:
        if g.get(k) is not None:
            out[k] = _number_or_none(g[k], f"{what}.{k}")
    if g.get("clock_reasons") is not None:
        reasons = g["clock_reasons"]
        if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
            raise ValueError(f"{what}.clock_reasons is not a list of names: {str(reasons)[:80]}")
        out["clock_reasons"] = list(reasons)
    if g.get("xid") is not None:
        xid = g["xid"]
        if not isinstance(xid, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                                 for x in xid):
            raise ValueError(f"{what}.xid is not a list of integers: {str(xid)[:80]}")
        out["xid"] = list(xid)
    if g.get("nvlink") is not None:
        links = g["nvlink"]
        if not isinstance(links, list):
            raise ValueError(f"{what}.nvlink is not a list")
        rows = []
        for link in links:
            if not isinstance(link, dict) or not isinstance(link.get("link"), int):
                raise ValueError(f"{what}.nvlink entry without a link number: {str(link)[:80]}")
            row: dict[str, Any] = {"link": link["link"]}
            for k in NVLINK_FIELDS:
                if link.get(k) is not None:
                    row[k] = _number_or_none(link[k], f"{what}.nvlink{link['link']}.{k}")
            rows.append(row)
        out["nvlink"] = rows
    return out


def health_text(g: dict[str, Any]) -> str:
    """What is wrong with a GPU in a few words ('' when nothing the sample carries is)."""
    bits = []
    brakes = [r for r in g.get("clock_reasons") or () if r in BRAKE_REASONS]
    if brakes:
        bits.append("brake " + "+".join(brakes))
    if g.get("xid"):
        bits.append("xid " + ",".join(str(x) for x in g["xid"]))
    if g.get("ecc_uncorrected_volatile"):
        bits.append(f"ecc-dbe {g['ecc_uncorrected_volatile']}")
    return " ".join(bits)


# Clock-event reasons that mean the GPU is braking for heat or power (not idle, not at its
# configured power cap, which a GPU under full load reaches as a matter of course).
BRAKE_REASONS = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                           "hw_power_brake_slowdown"})


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def summary_line(payload: dict[str, Any]) -> str:
    """One compact line per sample for the headless printer."""
    h = payload.get("host", {})
    load = h.get("load1")
    parts = [f"cpu {_pct(h.get('cpu'))} mem {fmt_bytes(h.get('mem_used'), 'GiB')}/"
             f"{fmt_bytes(h.get('mem_total'), 'GiB')} GiB"
             f" load {'-' if load is None else f'{load:.2f}'}"]
    for g in payload.get("gpus", []):
        power = g.get("power")
        temp = g.get("temp")
        health = health_text(g)
        parts.append(
            f"gpu{g['index']} {_pct(g.get('util'))} {fmt_bytes(g.get('mem_used'), 'GiB')}/"
            f"{fmt_bytes(g.get('mem_total'), 'GiB')}G {'-' if power is None else f'{power:.0f}'}W "
            f"{'-' if temp is None else f'{temp:.0f}'}C" + (f" [{health}]" if health else "")
        )
    if not payload.get("gpus"):
        parts.append(f"no GPU ({payload.get('source', 'none')})")
    return " | ".join(parts)


# -------------------------------------------------------------------------------------- stream
