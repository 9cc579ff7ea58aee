"""The console's side of a box-to-box copy (the box side: pipeline/shard_copy.py): a shard box
that does not share the training box's storage serves its finished shard once, the training
box fetches it straight from there, and the console only starts both ends and hands each the
copy's one-time token over its own SSH link (on stdin). No hidden-state byte crosses the console.

Before anything starts the console probes the route the copy will take: a probe server on the
shard box, a fetch of it from the training box, at the address the training box will use
(`extract.addresses`, a `train.addresses` entry for the box, else the address its sshd was
reached on). A box the training box cannot reach falls to the refusal line (or the relay, when
asked); a port that cannot be listened on is its own line (exit 2).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import EXIT_UNREACHABLE  # shard-fetch could not connect at all
from remote.errors import ConnectionFailed, StageFailed, UsageError
from remote.link import aio
from remote.link.transport import OutputLine, RemoteProcess
from remote.pipeline_runner import PipelineRunner, last_error

READY_TIMEOUT = 120.0  # seconds for the server's python to start listening
_HASH = "import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())"


def configured_address(name: str, resolved: dict[str, Any]) -> str:
    """The address the config gives for extract host `name`: its `extract.addresses` entry, else
    its `train.addresses` entry when it trains too; '' when neither says."""
    for hosts, addresses in (("extract_hosts", "extract_addresses"),
                             ("train_hosts", "train_addresses")):
        names = [str(h) for h in resolved.get(hosts) or []]
        given = [str(a) for a in resolved.get(addresses) or []]
        if given and name in names:
            return given[names.index(name)]
    return ""


def url(address: str, port: int) -> str:
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


@dataclass
class CopyServer:
    proc: RemoteProcess
    port: int
    token: str
    said: list[str] = field(default_factory=list)  # its later lines (refused requests, its end)
    _drain: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        """Closing its stdin ends it (the fetcher's /done usually did already)."""
        with suppress(ConnectionFailed, OSError):
            await self.proc.close_stdin()
        with suppress(ConnectionFailed, OSError, TimeoutError):
            await aio.wait_for(self.proc.wait(), 30)
        if self._drain is not None:
            self._drain.cancel()
            await asyncio.gather(self._drain, return_exceptions=True)
        with suppress(ConnectionFailed, OSError):
            await self.proc.close()


async def start_server(box: PipelineRunner, shard_dir: str | None, bind: str,
                       port: int) -> CopyServer:
    """`python -m pipeline shard-serve` on the shard box, with a fresh token; returns once it
    listens. Raises UsageError with its own line when it cannot (a port in use)."""
    src = await box.source_dir()
    token = secrets.token_hex(16)
    argv = box._argv("shard-serve", *(["--dir", shard_dir] if shard_dir else []),
                     "--bind", bind, "--port", str(port))
    proc = await box.transport.start(argv, env={"PYTHONPATH": src})
    await proc.write(f"{token}\n".encode())
    lines = proc.lines().__aiter__()
    out: list[str] = []
    err: list[str] = []

    async def ready() -> int:
        async for line in lines:
            (out if line.stream == "stdout" else err).append(line.text)
            with suppress(ValueError):
                rec = json.loads(line.text)
                if isinstance(rec, dict) and rec.get("serving"):
                    return int(rec["port"])
        return 0

    try:
        got = await aio.wait_for(ready(), READY_TIMEOUT)
    except TimeoutError:
        got = 0
        err.append(f"shard-serve did not listen within {READY_TIMEOUT:.0f} s")
    if not got:
        with suppress(ConnectionFailed, OSError):
            await proc.close()
        raise UsageError(f"{box.host.name}: cannot serve its shard to the training box: "
                         f"{last_error(''.join(x + chr(10) for x in out), chr(10).join(err))}")
    server = CopyServer(proc, got, token)

    async def drain(it: Any = lines) -> None:
        line: OutputLine
        async for line in it:
            server.said.append(line.text)

    server._drain = asyncio.create_task(drain())
    return server


async def _fetch(home: PipelineRunner, args: list[str], token: str,
                 on_line: Callable[[dict[str, Any]], None] | None = None,
                 ) -> tuple[int, dict[str, Any], str]:
    """`python -m pipeline shard-fetch ARGS` on the training box, the token on its stdin:
    (returncode, its last JSON line, its one-line error)."""
    src = await home.source_dir()
    proc = await home.transport.start(home._argv("shard-fetch", *args),
                                      env={"PYTHONPATH": src})
    out: list[str] = []
    err: list[str] = []
    last: dict[str, Any] = {}
    try:
        await proc.write(f"{token}\n".encode())
        await proc.close_stdin()
        async for line in proc.lines():
            (out if line.stream == "stdout" else err).append(line.text)
            if line.stream == "stdout":
                with suppress(ValueError):
                    rec = json.loads(line.text)
                    if isinstance(rec, dict):
                        last = rec
                        if on_line is not None:
                            on_line(rec)
        rc = await proc.wait()
    finally:
        with suppress(ConnectionFailed, OSError):
            await proc.close()
    return rc, last, last_error("".join(x + "\n" for x in out), "\n".join(err))


async def probe(box: PipelineRunner, home: PipelineRunner, address: str, port: int) -> str:
    """'' when the training box reaches a server on the shard box at `address` (and the token
    works), else why not. Raises UsageError when the shard box cannot listen (a port in use)."""
    server = await start_server(box, None, address, port)
    try:
        rc, _, why = await _fetch(home, ["--probe", "--url", url(address, server.port)],
                                  server.token)
    finally:
        await server.stop()
    if rc == 0:
        return ""
    return why if rc == EXIT_UNREACHABLE else f"the probe failed: {why}"


async def copy(home: PipelineRunner, config: str, box: PipelineRunner, *, shard_dir: str,
               staging: str, start: int, address: str, port: int,
               on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The finished shard in `shard_dir` on `box` fetched by the training box into `staging`,
    checked and placed from sample `start` (shard-gather's rules). Returns shard-fetch's line
    (`gathered`, `bytes`, `copied`, `packages`)."""
    done = await box.transport.run([box.python, "-c", _HASH, f"{shard_dir}/shard.json"],
                                   timeout=60)
    digest = done.stdout.strip()
    if done.returncode != 0 or len(digest) != 64:
        raise StageFailed(f"no shard manifest in {shard_dir} on {box.host.name}: "
                          f"{done.stderr.strip()[-200:]}")
    server = await start_server(box, shard_dir, address, port)

    def seen(rec: dict[str, Any]) -> None:
        if on_progress is not None and "copied" in rec and "of" in rec:
            on_progress(int(rec["copied"]), int(rec["of"]))

    try:
        rc, last, why = await _fetch(
            home, ["--config", config, "--url", url(address, server.port), "--dir", staging,
                   "--start", str(start), "--manifest-sha256", digest], server.token, seen)
    finally:
        await server.stop()
    if rc != 0 or "gathered" not in last:
        raise StageFailed(f"box-to-box copy from {box.host.name} to {home.host.name} failed: "
                          f"{why}; the shard is kept on {box.host.name}, `console run` again "
                          "copies it")
    return last
