"""Capture vLLM's torch-profiler traces from a box: start the profiler over a forwarded port,
send greedy completions so the window holds prefill and decode steps, stop it, wait until the
workers finish writing, fetch their trace files (the frontend's is left on the box). The
analysis of what comes back is remote/allreduce/trace.py.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from remote.allreduce.trace import is_frontend_trace
from remote.bench.reach import parse_vllm_url
from remote.errors import OutputRefused, Refused, RemoteError
from remote.link.hosts import HostConfig
from remote.link.out_files import claim
from remote.link.transport import Transport
from remote.spine import events as ev
from remote.spine.bus import EventBus

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
        raise RemoteError(f"cannot list {directory} on the box: "
                           f"{done.stderr.strip()[-200:] or f'exit {done.returncode}'}")
    try:
        return {str(p): int(size) for p, size, _ in json.loads(done.stdout)}
    except (ValueError, TypeError) as exc:
        raise RemoteError(f"listing {directory} printed no JSON list: {exc}") from None


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
    requests: int = 0,
    max_tokens: int = 32,
    force: bool = False,
) -> list[Path]:
    """Start vLLM's profiler, wait (sending `requests` greedy completions meanwhile, so the
    window holds prefill and decode steps), stop it, fetch the new workers' trace files (the
    frontend's is left on the box). Returns local paths."""
    import httpx

    target = parse_vllm_url(url or host.vllm_url)
    fwd = await transport.forward(target.port, target.host)
    root = target.with_host_port("127.0.0.1", fwd.local_port)
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
                raise RemoteError(f"vLLM not reachable at {url or host.vllm_url} on "
                                   f"{host.name}: {exc}") from None
            if r.status_code in (404, 405):
                raise Refused(
                    f"vLLM {version} at {url or host.vllm_url} has no profiler endpoints: start "
                    "it with --profiler-config.profiler=torch --profiler-config."
                    "torch_profiler_dir=DIR (vLLM >= 0.13) or VLLM_TORCH_PROFILER_DIR=DIR "
                    "(<= 0.15), DIR being --profiler-dir")
            if r.status_code >= 400:
                raise RemoteError(f"POST /start_profile: HTTP {r.status_code}: {r.text[:200]}")
            bus.emit(ev.CONSOLE_INFO, host.name,
                     message=f"profiling vLLM {version} for {seconds:g}s"
                     + (f" with {requests} request(s)" if requests else ""))
            try:
                await asyncio.gather(asyncio.sleep(seconds),
                                     _load(client, root, requests, max_tokens))
            finally:
                r = await client.post(root + "/stop_profile")
            if r.status_code >= 400:
                raise RemoteError(f"POST /stop_profile: HTTP {r.status_code}: {r.text[:200]}")
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
            raise RemoteError(f"no complete trace appeared in {profiler_dir} on {host.name} "
                               f"within {settle_timeout:g}s of /stop_profile")
        last = new
        await asyncio.sleep(poll)
    frontend = [p for p in _prefer_gz(new) if is_frontend_trace(Path(p))]
    if frontend:
        bus.emit(ev.CONSOLE_INFO, host.name, message=f"left {len(frontend)} vLLM frontend "
                 "trace(s) on the box (API server, CPU only): " + ", ".join(frontend))
    workers = [p for p in _prefer_gz(new) if not is_frontend_trace(Path(p))]
    if not workers:
        raise RemoteError(f"vLLM wrote no worker trace to {profiler_dir} on {host.name} "
                           f"(only {len(frontend)} frontend trace(s))")
    if local_dir.exists() and not local_dir.is_dir():
        raise OutputRefused(f"--out {local_dir} is a file, not a directory: give a directory")
    # Every name judged before the first is fetched: a refusal leaves the directory as it was.
    dests = [claim(local_dir / posixpath.basename(remote), force=force, what="trace").path
             for remote in workers]
    local_dir.mkdir(parents=True, exist_ok=True)
    for remote, dest in zip(workers, dests, strict=True):
        await transport.get(remote, dest)
    bus.emit(ev.CONSOLE_INFO, host.name, message=f"fetched {len(dests)} trace file(s) to "
             f"{local_dir}", files=[str(p) for p in dests])
    return dests


async def _load(client: Any, root: str, requests: int, max_tokens: int) -> None:
    """Greedy completions, all at once, so the profiled window holds decode steps."""
    if requests <= 0:
        return
    import httpx

    try:
        r = await client.get(root + "/v1/models")
        model = r.json()["data"][0]["id"]

        async def one(i: int) -> None:
            resp = await client.post(root + "/v1/completions", json={
                "model": model, "prompt": f"request {i}: tell me a story", "temperature": 0.0,
                "max_tokens": max_tokens, "ignore_eos": True})
            if resp.status_code >= 400:
                raise RemoteError(f"POST /v1/completions: HTTP {resp.status_code}: "
                                   f"{resp.text[:200]}")

        await asyncio.gather(*(one(i) for i in range(requests)))
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        raise RemoteError(f"load during the capture failed: {type(exc).__name__}: {exc}"
                           ) from None
