"""Run the all-reduce bus-bandwidth sweep on a box and turn its lines into one result event.

The sweep itself (pipeline/allreduce_sweep.py) needs torch, so it runs with the box's ML
python; this side uploads it, validates sizes before anything is sent, and reports rows as an
`allreduce.result` event with mode "sweep".
"""

from __future__ import annotations

import json
import posixpath
import time
from collections import deque
from pathlib import Path
from typing import Any

from pipeline.units import fmt_bytes
from remote.errors import SweepFailed, UsageError
from remote.link import aio
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.link.upload import upload
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.stats.stream import expand_remote_path

SCRIPT = Path(__file__).resolve().parents[2] / "pipeline" / "allreduce_sweep.py"
MAX_POINTS = 64
STAGE = "allreduce-sweep"


def parse_size(text: str) -> int:
    """'4K', '4KB', '1.5M', '4096' -> bytes: the box script's own reading, checked here first."""
    from pipeline.allreduce_sweep import parse_size as read_size

    try:
        return int(read_size(text))
    except ValueError as exc:
        raise UsageError(f"{exc} (use e.g. 4K, 1M, 256M)") from None


def parse_sizes(spec: str) -> list[int]:
    """'4K..256M' (doubling, as nccl-tests -b 4K -e 256M -f 2), '4K,1M', or a mix."""
    sizes: list[int] = []
    for part in spec.split(","):
        if ".." in part:
            lo_text, _, hi_text = part.partition("..")
            lo, hi = parse_size(lo_text), parse_size(hi_text)
            if lo > hi:
                raise UsageError(f"size range {part!r} runs backwards")
            size = lo
            while size <= hi:
                sizes.append(size)
                size *= 2
        elif part.strip():
            sizes.append(parse_size(part))
    if not sizes:
        raise UsageError(f"no message sizes in {spec!r}")
    if len(sizes) > MAX_POINTS:
        raise UsageError(f"{len(sizes)} message sizes is too many (at most {MAX_POINTS})")
    return sizes


def sweep_summary(payload: dict[str, Any]) -> str:
    rows = payload.get("rows") or []
    head = f"all-reduce sweep, {payload.get('ranks')} ranks, {payload.get('backend', '?')}"
    if not rows:
        return head + ": no rows"
    best = max(rows, key=lambda r: r["busbw"])
    bad = sum(1 for r in rows if not r.get("ok", True))
    return (f"{head}: peak busbw {fmt_bytes(best['busbw'])}/s at {fmt_bytes(best['size'])}"
            + (f", {bad} sizes gave WRONG sums" if bad else ""))


async def run_sweep(
    transport: Transport,
    host: HostConfig,
    bus: EventBus,
    *,
    ranks: int,
    sizes: list[int],
    iters: int = 20,
    warmup: int = 5,
    backend: str = "auto",
    dtype: str = "float32",
    timeout: float = 600.0,
) -> dict[str, Any]:
    if ranks < 1:
        raise UsageError("--ranks must be at least 1")
    workdir = await expand_remote_path(transport, host.python, host.workdir)
    remote = posixpath.join(workdir, "pipeline", "allreduce_sweep.py")
    await upload(transport, SCRIPT, remote, python=host.python, bus=bus, host=host.name)
    argv = [host.python, "-u", remote, "--ranks", str(ranks),
            "--sizes", ",".join(str(s) for s in sizes), "--iters", str(iters),
            "--warmup", str(warmup), "--backend", backend, "--dtype", dtype,
            "--timeout", repr(float(timeout))]
    start: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    stderr: deque[str] = deque(maxlen=50)
    error: str | None = None
    ended = False
    # Streamed, not collected: a CPU sweep up to 256M takes minutes, and each size is progress.
    t0 = time.monotonic()
    proc = await transport.start(argv)
    try:
        await proc.close_stdin()

        async def read() -> int:
            nonlocal start, error, ended
            async for line in proc.lines():
                if line.stream == "stderr":
                    stderr.append(line.text)
                    continue
                try:
                    obj = json.loads(line.text)
                except ValueError:
                    bus.emit(ev.CONSOLE_WARNING, host.name,
                             message=f"allreduce sweep: {line.text[:200]}")
                    continue
                kind = obj.get("type") if isinstance(obj, dict) else None
                if kind == "start":
                    start = obj
                    bus.emit(ev.STAGE_START, host.name, stage=STAGE)
                elif kind == "row":
                    rows.append({k: obj.get(k) for k in
                                 ("size", "count", "dtype", "time_s", "algbw", "busbw", "ok")})
                    bus.emit(ev.STAGE_PROGRESS, host.name, stage=STAGE, done=len(rows),
                             total=len(sizes), unit="sizes")
                elif kind == "error":
                    error = str(obj.get("message"))
                elif kind == "end":
                    ended = True
            return await proc.wait()

        returncode = await aio.wait_for(read(), timeout + 60)
    except TimeoutError:
        raise SweepFailed(f"all-reduce sweep on {host.name} gave no result within "
                          f"{timeout + 60:g}s") from None
    finally:
        await proc.close()
    if returncode != 0 or not ended:
        why = error or (stderr[-1] if stderr else f"exit {returncode}")
        if "No module named 'torch'" in ("\n".join(stderr) + (error or "")):
            why = f"torch is not importable with {host.python} on {host.name}"
        bus.emit(ev.STAGE_END, host.name, stage=STAGE, ok=False,
                 seconds=round(time.monotonic() - t0, 3))
        raise SweepFailed(f"all-reduce sweep on {host.name} failed: {why}")
    payload: dict[str, Any] = {
        "mode": "sweep", "backend": start.get("backend"), "ranks": start.get("world_size", ranks),
        "device": start.get("device_name") or start.get("device"), "torch": start.get("torch"),
        "dtype": dtype, "iters": iters, "warmup": warmup, "rows": rows,
    }
    payload["summary"] = sweep_summary(payload)
    bus.emit(ev.STAGE_END, host.name, stage=STAGE, ok=True, seconds=round(time.monotonic() - t0, 3))
    bus.emit(ev.ALLREDUCE_RESULT, host.name, **payload)
    return payload


def format_sweep_table(payload: dict[str, Any]) -> str:
    rows = [("SIZE", "COUNT", "TYPE", "TIME us", "ALGBW GiB/s", "BUSBW GiB/s", "CHECK")]
    for r in payload["rows"]:
        rows.append((fmt_bytes(r["size"]), str(r["count"]), str(r["dtype"]),
                     f"{r['time_s'] * 1e6:.1f}", fmt_bytes(r["algbw"], "GiB", 3),
                     fmt_bytes(r["busbw"], "GiB", 3), "ok" if r["ok"] else "WRONG"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"# {payload['summary']} (device {payload.get('device')}, torch "
             f"{payload.get('torch')}, {payload['iters']} iters)"]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)
