"""Share of time spent in all-reduce, from torch-profiler Chrome traces (as vLLM writes them).

vLLM's profiler (VLLM_TORCH_PROFILER_DIR or --profiler-config, then POST /start_profile and
/stop_profile) writes one Chrome-trace JSON per worker, usually `.pt.trace.json.gz`. Per rank
we measure:

- GPU traces ("device" basis): busy = union of the intervals of device activity (kernels,
  memcpy, memset); all-reduce = union of the intervals of kernels whose name matches the
  all-reduce list; share = all-reduce / busy. Unions, not sums, so kernels overlapping on two
  streams are not counted twice.
- CPU traces with gloo ("host" basis, no device activity): all-reduce = union of the first
  host op of HOST_OPS present (`gloo:all_reduce`, the collective's own record; the dispatcher
  op `c10d::allreduce_` would count each call twice beside it, so it is the fallback), over
  the traced window.

The kernel-name list is data: fnmatch patterns, extended with --kernels.

Decode vs prefill: vLLM annotates every engine step on each worker with
`execute_context_N(T)_generation_M(U)` (N prefill requests with T tokens, M decode requests;
`execute_S_context_N(sqT...)_generation_M(sqU...)` with detailed annotations; gpu_worker.py
annotate_profile, 0.16 and 0.32 alike, CPU workers included). A step with N = 0 and M > 0 is a
decode step. The decode share is all-reduce inside decode steps over the decode steps' time:
host ops by their own interval clipped to the steps; device kernels by the step their launch
(the runtime call with the same correlation id) falls in, their time over the device busy time
of those steps.

vLLM also writes a frontend trace beside the workers' (`<host>_<pid>.async_llm.<ns>.pt.trace.json.gz`,
CPU only, the API server's asyncio loop): it holds no model work, so it is named and ignored.

Getting the traces off a box (the profiler endpoints, the settle wait, the fetch) is
remote/allreduce/capture.py.
"""

from __future__ import annotations

import fnmatch
import gzip
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote.errors import TraceError

# All-reduce kernels seen in vLLM traces (docs/design.md §2.8). Matched against the full kernel name,
# which carries a `void ` prefix, template arguments and a parameter list.
DEFAULT_KERNELS: tuple[str, ...] = (
    "*ncclDevKernel_AllReduce_*",
    "*ncclKernel_AllReduce_*",
    "*vllm::cross_device_reduce_1stage*",
    "*vllm::cross_device_reduce_2stage*",
    "*multimem_all_reduce_kernel*",
    "*two_shot_all_reduce_kernel_inplace*",
    "*vllm::mnnvl::twoshotAllreduceKernel*",
)
# Host-side records of an all-reduce when the trace has no device activity. The collectives'
# own records come first and are counted together (vLLM's CPU TP all-reduce is its shared-memory
# kernel `_C::shm_allreduce`, cpu_communicator.py; plain torch.distributed on CPU records
# `gloo:all_reduce`); the wrappers around them (`vllm::all_reduce`, vLLM's custom op, and the
# dispatcher's `c10d::allreduce_`) are a fallback, counted only where no inner record exists, so
# no call is counted twice.
HOST_OPS: tuple[str, ...] = ("_C::shm_allreduce", "gloo:all_reduce")
HOST_WRAPPER_OPS: tuple[str, ...] = ("vllm::all_reduce", "c10d::allreduce_")
FRONTEND_MARK = ".async_llm."
_STEP = re.compile(r"^execute_(?:\d+_)?context_(\d+)\(\D*(\d+)[^)]*\)_generation_(\d+)\(\D*(\d+)")
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_RANK_IN_NAME = re.compile(r"(?:rank|tp)[-_]?(\d+)", re.IGNORECASE)


@dataclass
class Phase:
    """One kind of engine step (decode or prefill) on one rank."""

    steps: int = 0
    time_us: float = 0.0  # host: the steps' wall time; device: device busy inside the steps
    allreduce_us: float = 0.0
    calls: int = 0

    @property
    def share(self) -> float:
        return self.allreduce_us / self.time_us if self.time_us else 0.0

    def add(self, other: Phase) -> None:
        self.steps += other.steps
        self.time_us += other.time_us
        self.allreduce_us += other.allreduce_us
        self.calls += other.calls

    def row(self) -> dict[str, Any]:
        return {"steps": self.steps, "time_s": self.time_us / 1e6,
                "allreduce_s": self.allreduce_us / 1e6, "calls": self.calls,
                "share": self.share}


@dataclass
class RankStats:
    rank: int
    file: str
    basis: str  # "device" | "host"
    busy_us: float = 0.0
    allreduce_us: float = 0.0
    calls: int = 0
    call_us: float = 0.0  # sum of matched durations (for the mean per call)
    kernels: dict[str, list[float]] = field(default_factory=dict)  # short name -> [count, us]
    decode: Phase = field(default_factory=Phase)
    prefill: Phase = field(default_factory=Phase)

    @property
    def share(self) -> float:
        return self.allreduce_us / self.busy_us if self.busy_us else 0.0

    def row(self) -> dict[str, Any]:
        return {"rank": self.rank, "basis": self.basis, "calls": self.calls,
                "allreduce_s": self.allreduce_us / 1e6, "busy_s": self.busy_us / 1e6,
                "share": self.share,
                "mean_s": self.call_us / self.calls / 1e6 if self.calls else 0.0,
                "decode": self.decode.row(), "prefill": self.prefill.row(),
                "file": self.file}


def load_trace(path: Path) -> dict[str, Any]:
    try:
        raw = Path(path).read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, EOFError, ValueError) as exc:
        raise TraceError(f"{path}: not a Chrome trace ({type(exc).__name__}: {exc})") from None
    if isinstance(data, list):  # the bare-array form of the Chrome trace format
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: not a Chrome trace (no traceEvents list)")
    return data


def short_name(name: str) -> str:
    """`void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)` -> the function name."""
    n = name.removeprefix("void ").strip()
    depth = 0
    for i, ch in enumerate(n):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            n = n[:i]
            break
    return re.sub(r"<.*>$", "", n).strip()


def _union(intervals: Iterable[tuple[float, float]]) -> float:
    total = 0.0
    end = -float("inf")
    start = end
    for s, e in sorted(intervals):
        if s > end:
            if end > start:
                total += end - start
            start, end = s, e
        elif e > end:
            end = e
    if end > start:
        total += end - start
    return total


def _rank_of(data: dict[str, Any], path: Path, position: int) -> int:
    info = data.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else position


def _clip(intervals: Iterable[tuple[float, float]], windows: list[tuple[float, float]]
          ) -> list[tuple[float, float]]:
    """The parts of `intervals` inside the (disjoint or not) `windows`."""
    out = []
    for s, e in intervals:
        for ws, we in windows:
            lo, hi = max(s, ws), min(e, we)
            if hi > lo:
                out.append((lo, hi))
    return out


def _inside(t: float, windows: list[tuple[float, float]]) -> bool:
    return any(ws <= t <= we for ws, we in windows)


def step_windows(events: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """vLLM's per-step annotations on the host timeline, split into decode and prefill.
    A step with prefill requests (context_N, N > 0) is prefill even if it also decodes."""
    out: dict[str, list[tuple[float, float]]] = {"decode": [], "prefill": []}
    for e in events:
        if e.get("cat") == "gpu_user_annotation":
            continue  # the same range mirrored on the device timeline
        m = _STEP.match(str(e.get("name", "")))
        if not m:
            continue
        ctx_reqs, gen_reqs = int(m.group(1)), int(m.group(3))
        if ctx_reqs > 0:
            out["prefill"].append((e["ts"], e["ts"] + e["dur"]))
        elif gen_reqs > 0:
            out["decode"].append((e["ts"], e["ts"] + e["dur"]))
    return out


def _host_matches(host: list[dict[str, Any]]) -> list[dict[str, Any]]:
    matched = [e for e in host if e.get("name") in HOST_OPS]
    if not matched:
        for op in HOST_WRAPPER_OPS:
            matched = [e for e in host if e.get("name") == op]
            if matched:
                break
    return matched


def analyse_events(events: list[Any], rank: int, file: str,
                   kernels: Sequence[str] = DEFAULT_KERNELS) -> RankStats:
    complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
                and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]
    device = [e for e in complete if e.get("cat") in DEVICE_CATS]
    windows = step_windows(complete)
    if device:
        st = RankStats(rank, file, "device")
        st.busy_us = _union((e["ts"], e["ts"] + e["dur"]) for e in device)
        matched = [e for e in device if e.get("cat") == "kernel"
                   and any(fnmatch.fnmatchcase(str(e.get("name", "")), p) for p in kernels)]
        _device_phases(st, complete, device, matched, windows)
    else:
        st = RankStats(rank, file, "host")
        host = [e for e in complete if e.get("cat") != "Trace"]
        if host:
            st.busy_us = (max(e["ts"] + e["dur"] for e in host) - min(e["ts"] for e in host))
        matched = _host_matches(host)
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in matched]
        for name, phase in (("decode", st.decode), ("prefill", st.prefill)):
            w = windows[name]
            phase.steps = len(w)
            phase.time_us = _union(w)
            phase.allreduce_us = _union(_clip(spans, w))
            phase.calls = sum(1 for e in matched if _inside(e["ts"], w))
    st.allreduce_us = _union((e["ts"], e["ts"] + e["dur"]) for e in matched)
    st.calls = len(matched)
    st.call_us = float(sum(e["dur"] for e in matched))
    for e in matched:
        k = st.kernels.setdefault(short_name(str(e["name"])), [0, 0.0])
        k[0] += 1
        k[1] += e["dur"]
    return st


def _device_phases(st: RankStats, complete: list[dict[str, Any]], device: list[dict[str, Any]],
                   matched: list[dict[str, Any]],
                   windows: dict[str, list[tuple[float, float]]]) -> None:
    """Device work belongs to the step whose host annotation holds its launch call."""
    launch: dict[Any, float] = {}
    for e in complete:
        if e.get("cat") in DEVICE_CATS:
            continue
        corr = (e.get("args") or {}).get("correlation")
        if corr is not None and str(e.get("cat", "")).endswith(("runtime", "driver")):
            launch[corr] = e["ts"]
    matched_ids = {id(e) for e in matched}
    for name, phase in (("decode", st.decode), ("prefill", st.prefill)):
        w = windows[name]
        phase.steps = len(w)
        mine = [e for e in device
                if _inside(launch.get((e.get("args") or {}).get("correlation"), -1e30), w)]
        phase.time_us = _union((e["ts"], e["ts"] + e["dur"]) for e in mine)
        ar = [e for e in mine if id(e) in matched_ids]
        phase.allreduce_us = _union((e["ts"], e["ts"] + e["dur"]) for e in ar)
        phase.calls = len(ar)


def is_frontend_trace(path: Path) -> bool:
    """vLLM's API-server trace (CPU only, no model work) written beside the workers'."""
    return FRONTEND_MARK in Path(path).name


def analyse_files(paths: Sequence[Path], kernels: Sequence[str] = DEFAULT_KERNELS
                  ) -> dict[str, Any]:
    """An allreduce.result payload (mode "trace") for one trace file per rank."""
    if not paths:
        raise TraceError("no trace files given")
    ignored = [{"file": str(p), "why": "vLLM frontend trace (API server, CPU only)"}
               for p in paths if is_frontend_trace(Path(p))]
    paths = [p for p in paths if not is_frontend_trace(Path(p))]
    if not paths:
        raise TraceError("only vLLM frontend traces (*.async_llm.*) given: pass the workers' "
                         "traces")
    ranks: dict[int, RankStats] = {}
    for i, path in enumerate(paths):
        data = load_trace(Path(path))
        rank = _rank_of(data, Path(path), i)
        if rank in ranks:
            raise TraceError(f"two traces for rank {rank}: {ranks[rank].file} and {path} "
                             "(pass one capture's files)")
        ranks[rank] = analyse_events(data["traceEvents"], rank, str(path), kernels)
    per_rank = [ranks[r] for r in sorted(ranks)]
    busy = sum(r.busy_us for r in per_rank)
    ar = sum(r.allreduce_us for r in per_rank)
    calls = sum(r.calls for r in per_rank)
    call_us = sum(r.call_us for r in per_rank)
    rows = [r.row() for r in per_rank]
    basis = ",".join(sorted({r.basis for r in per_rank}))
    overall: dict[str, Any] = {"rank": "all", "basis": basis, "calls": calls, "allreduce_s": ar / 1e6,
               "busy_s": busy / 1e6, "share": ar / busy if busy else 0.0,
               "mean_s": call_us / calls / 1e6 if calls else 0.0, "file": ""}
    merged: dict[str, list[float]] = {}
    for r in per_rank:
        for name, (n, us) in r.kernels.items():
            m = merged.setdefault(name, [0, 0.0])
            m[0] += n
            m[1] += us
    kernel_rows: list[dict[str, Any]] = [
        {"name": n, "calls": int(c), "total_s": us / 1e6, "mean_s": us / c / 1e6}
        for n, (c, us) in sorted(merged.items(), key=lambda kv: -kv[1][1])
    ]
    decode, prefill = Phase(), Phase()
    for r in per_rank:
        decode.add(r.decode)
        prefill.add(r.prefill)
    overall["decode"], overall["prefill"] = decode.row(), prefill.row()
    payload: dict[str, Any] = {"mode": "trace", "basis": basis, "rows": [*rows, overall],
                               "kernels": kernel_rows, "patterns": list(kernels),
                               "host_ops": [*HOST_OPS, *HOST_WRAPPER_OPS],
                               "decode": decode.row(), "prefill": prefill.row(),
                               "ignored": ignored}
    what = "device time" if basis == "device" else "traced time"
    payload["summary"] = (f"all-reduce {100 * overall['share']:.1f}% of {what} over "
                          f"{len(per_rank)} rank(s), {calls} calls, mean "
                          f"{overall['mean_s'] * 1e6:.1f} us")
    if not busy:
        payload["summary"] += (" (no device activity traced: was the model running during "
                               "the capture?)")
    elif not calls:
        payload["summary"] += " (no all-reduce matched: check --kernels)"
    if decode.steps:
        payload["summary"] += (f"; decode steps: all-reduce {100 * decode.share:.1f}% of "
                               f"{decode.steps} step(s) over the ranks")
        if prefill.steps:
            payload["summary"] += (f", prefill steps {100 * prefill.share:.1f}% of "
                                   f"{prefill.steps}")
    elif busy:
        payload["summary"] += ("; no decode-step annotations (execute_context_0(..)_generation_"
                               "M(..)) in the traces: decode not separated")
    return payload


def format_trace_table(payload: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [
        ("RANK", "BASIS", "CALLS", "ALLREDUCE ms", "BUSY ms", "SHARE", "MEAN us")]
    for r in payload["rows"]:
        rows.append((str(r["rank"]), r["basis"], str(r["calls"]), f"{r['allreduce_s'] * 1e3:.3f}",
                     f"{r['busy_s'] * 1e3:.3f}", f"{100 * r['share']:.1f}%",
                     f"{r['mean_s'] * 1e6:.1f}"))
    out = [f"# {payload['summary']}"]
    out += [f"# ignored {i['file']}: {i['why']}" for i in payload.get("ignored", [])]
    out += _aligned(rows)
    if payload.get("decode", {}).get("steps") or payload.get("prefill", {}).get("steps"):
        prow: list[tuple[str, ...]] = [
            ("RANK", "PHASE", "STEPS", "CALLS", "ALLREDUCE ms", "STEP ms", "SHARE")]
        for r in payload["rows"]:
            for phase in ("decode", "prefill"):
                ph = r.get(phase)
                if ph and ph["steps"]:
                    prow.append((str(r["rank"]), phase, str(ph["steps"]), str(ph["calls"]),
                                 f"{ph['allreduce_s'] * 1e3:.3f}", f"{ph['time_s'] * 1e3:.3f}",
                                 f"{100 * ph['share']:.1f}%"))
        out += ["", *_aligned(prow)]
    if payload.get("kernels"):
        krows: list[tuple[str, ...]] = [("KERNEL", "CALLS", "TOTAL ms", "MEAN us")]
        krows += [(k["name"], str(k["calls"]), f"{k['total_s'] * 1e3:.3f}",
                   f"{k['mean_s'] * 1e6:.1f}") for k in payload["kernels"]]
        out += ["", *_aligned(krows)]
    return "\n".join(out)


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
