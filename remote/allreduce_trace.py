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
"""

from __future__ import annotations

import asyncio
import fnmatch
import gzip
import json
import posixpath
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from remote import events as ev
from remote.bus import EventBus
from remote.errors import ConsoleError, Refused, UsageError
from remote.hosts import HostConfig
from remote.transport import Transport

# All-reduce kernels seen in vLLM traces (design.md §2). Matched against the full kernel name,
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
# Host-side records of an all-reduce when the trace has no device activity, best first.
HOST_OPS: tuple[str, ...] = ("gloo:all_reduce", "c10d::allreduce_")
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_IN_NAME = re.compile(r"(?:rank|tp)[-_]?(\d+)", re.IGNORECASE)


class TraceError(UsageError):
    """A file that is not a Chrome trace: named, one line, exit 2."""


# ------------------------------------------------------------------------------------ analysis


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

    @property
    def share(self) -> float:
        return self.allreduce_us / self.busy_us if self.busy_us else 0.0

    def row(self) -> dict[str, Any]:
        return {"rank": self.rank, "basis": self.basis, "calls": self.calls,
                "allreduce_s": self.allreduce_us / 1e6, "busy_s": self.busy_us / 1e6,
                "share": self.share,
                "mean_s": self.call_us / self.calls / 1e6 if self.calls else 0.0,
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


def analyse_events(events: list[Any], rank: int, file: str,
                   kernels: Sequence[str] = DEFAULT_KERNELS) -> RankStats:
    complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
                and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]
    device = [e for e in complete if e.get("cat") in DEVICE_CATS]
    if device:
        st = RankStats(rank, file, "device")
        st.busy_us = _union((e["ts"], e["ts"] + e["dur"]) for e in device)
        matched = [e for e in device if e.get("cat") == "kernel"
                   and any(fnmatch.fnmatchcase(str(e.get("name", "")), p) for p in kernels)]
    else:
        st = RankStats(rank, file, "host")
        host = [e for e in complete if e.get("cat") != "Trace"]
        if host:
            st.busy_us = (max(e["ts"] + e["dur"] for e in host) - min(e["ts"] for e in host))
        matched = []
        for op in HOST_OPS:
            matched = [e for e in host if e.get("name") == op]
            if matched:
                break
    st.allreduce_us = _union((e["ts"], e["ts"] + e["dur"]) for e in matched)
    st.calls = len(matched)
    st.call_us = float(sum(e["dur"] for e in matched))
    for e in matched:
        k = st.kernels.setdefault(short_name(str(e["name"])), [0, 0.0])
        k[0] += 1
        k[1] += e["dur"]
    return st


def analyse_files(paths: Sequence[Path], kernels: Sequence[str] = DEFAULT_KERNELS
                  ) -> dict[str, Any]:
    """An allreduce.result payload (mode "trace") for one trace file per rank."""
    if not paths:
        raise TraceError("no trace files given")
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
    payload: dict[str, Any] = {"mode": "trace", "basis": basis, "rows": [*rows, overall],
                               "kernels": kernel_rows, "patterns": list(kernels)}
    what = "device time" if basis == "device" else "traced time"
    payload["summary"] = (f"all-reduce {100 * overall['share']:.1f}% of {what} over "
                          f"{len(per_rank)} rank(s), {calls} calls, mean "
                          f"{overall['mean_s'] * 1e6:.1f} us")
    if not busy:
        payload["summary"] += (" (no device activity traced: was the model running during "
                               "the capture?)")
    elif not calls:
        payload["summary"] += " (no all-reduce matched: check --kernels)"
    return payload


def format_trace_table(payload: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [
        ("RANK", "BASIS", "CALLS", "ALLREDUCE ms", "BUSY ms", "SHARE", "MEAN us")]
    for r in payload["rows"]:
        rows.append((str(r["rank"]), r["basis"], str(r["calls"]), f"{r['allreduce_s'] * 1e3:.3f}",
                     f"{r['busy_s'] * 1e3:.3f}", f"{100 * r['share']:.1f}%",
                     f"{r['mean_s'] * 1e6:.1f}"))
    out = [f"# {payload['summary']}"]
    out += _aligned(rows)
    if payload.get("kernels"):
        krows: list[tuple[str, ...]] = [("KERNEL", "CALLS", "TOTAL ms", "MEAN us")]
        krows += [(k["name"], str(k["calls"]), f"{k['total_s'] * 1e3:.3f}",
                   f"{k['mean_s'] * 1e6:.1f}") for k in payload["kernels"]]
        out += ["", *_aligned(krows)]
    return "\n".join(out)


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


# ------------------------------------------------------------------------------------- capture

# Runs on the box (stdlib, Python >= 3.8): trace files under a directory with size and mtime.
_LIST_TRACES = (
    "import json,os,sys\n"
    "out=[]\n"
    "for d,_,fs in os.walk(os.path.expanduser(sys.argv[1])):\n"
    "    for f in fs:\n"
    "        if f.endswith(('.json','.json.gz')):\n"
    "            p=os.path.join(d,f)\n"
    "            try:\n"
    "                s=os.stat(p)\n"
    "            except OSError:\n"
    "                continue\n"
    "            out.append([p,s.st_size,s.st_mtime])\n"
    "print(json.dumps(out))\n"
)


async def list_traces(transport: Transport, python: str, directory: str) -> dict[str, int]:
    done = await transport.run([python, "-c", _LIST_TRACES, directory], timeout=60)
    if done.returncode != 0:
        raise ConsoleError(f"cannot list {directory} on the box: "
                           f"{done.stderr.strip()[-200:] or f'exit {done.returncode}'}")
    try:
        return {str(p): int(size) for p, size, _ in json.loads(done.stdout)}
    except (ValueError, TypeError) as exc:
        raise ConsoleError(f"listing {directory} printed no JSON list: {exc}") from None


def _prefer_gz(names: Iterable[str]) -> list[str]:
    s = set(names)
    return sorted(n for n in s if not (n.endswith(".json") and n + ".gz" in s))


async def capture(
    transport: Transport,
    host: HostConfig,
    bus: EventBus,
    *,
    profiler_dir: str,
    local_dir: Path,
    seconds: float = 5.0,
    url: str | None = None,
    settle_timeout: float = 600.0,
    poll: float = 1.0,
) -> list[Path]:
    """Start vLLM's profiler, wait, stop it, fetch the new trace files. Returns local paths."""
    import httpx

    base = urlsplit(url or host.vllm_url)
    if base.scheme not in ("http", "https") or not base.hostname:
        raise UsageError(f"not an http URL for vLLM: {url or host.vllm_url!r}")
    port = base.port or (443 if base.scheme == "https" else 80)
    fwd = await transport.forward(port, base.hostname)
    root = f"{base.scheme}://127.0.0.1:{fwd.local_port}{base.path.rstrip('/')}"
    before = await list_traces(transport, host.python, profiler_dir)
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=600.0)) as client:
            version = "unknown"
            try:
                r = await client.get(root + "/version")
                if r.status_code == 200:
                    version = str(r.json().get("version", "unknown"))
                r = await client.post(root + "/start_profile")
            except httpx.HTTPError as exc:
                raise ConsoleError(f"vLLM not reachable at {url or host.vllm_url} on "
                                   f"{host.name}: {exc}") from None
            if r.status_code in (404, 405):
                raise Refused(
                    f"vLLM {version} at {url or host.vllm_url} has no profiler endpoints: start "
                    "it with --profiler-config.profiler=torch --profiler-config."
                    "torch_profiler_dir=DIR (vLLM >= 0.13) or VLLM_TORCH_PROFILER_DIR=DIR "
                    "(<= 0.15), DIR being --profiler-dir")
            if r.status_code >= 400:
                raise ConsoleError(f"POST /start_profile: HTTP {r.status_code}: {r.text[:200]}")
            bus.emit(ev.CONSOLE_INFO, host.name,
                     message=f"profiling vLLM {version} for {seconds:g}s")
            await asyncio.sleep(seconds)
            r = await client.post(root + "/stop_profile")
            if r.status_code >= 400:
                raise ConsoleError(f"POST /stop_profile: HTTP {r.status_code}: {r.text[:200]}")
    finally:
        await fwd.close()
    # Workers may still be writing (and gzipping) their traces: wait until the set of new files
    # and their sizes stop changing.
    deadline = time.monotonic() + settle_timeout
    last: dict[str, int] | None = None
    while True:
        now = await list_traces(transport, host.python, profiler_dir)
        new = {p: s for p, s in now.items() if before.get(p) != s}
        if new and new == last:
            break
        if time.monotonic() > deadline:
            raise ConsoleError(f"no complete trace appeared in {profiler_dir} on {host.name} "
                               f"within {settle_timeout:g}s of /stop_profile")
        last = new
        await asyncio.sleep(poll)
    local_dir.mkdir(parents=True, exist_ok=True)
    fetched = []
    for remote in _prefer_gz(new):
        dest = local_dir / posixpath.basename(remote)
        await transport.get(remote, dest)
        fetched.append(dest)
    bus.emit(ev.CONSOLE_INFO, host.name, message=f"fetched {len(fetched)} trace file(s) to "
             f"{local_dir}", files=[str(p) for p in fetched])
    return fetched
