"""Detached runs on the box that outlive the SSH connection and the console.

The box keeps the truth (remote/jobs/helper.py describes the run directory); this side launches,
asks, tails by byte offset and cancels through one helper command per operation, over any
Transport. A dropped connection only ends a stream: the tail restarts from the last offset it
delivered, so no line is lost or repeated, and with a CursorStore a new console process does the
same.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import posixpath
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import suppress

from remote.errors import (
    CancelRefused,
    ConnectionFailed,
    Dropped,
    JobHelperError,
    JobLocked,
    JobNotFound,
    NameHeld,
    RemoteCommandError,
    UsageError,
)
from remote.jobs.blocks import RECORD, publish_with_stages, split_lines, stage_events, trailer
from remote.jobs.cursors import CursorStore
from remote.jobs.install import install_helper
from remote.jobs.names import launch_name
from remote.jobs.records import EXIT_LOCKED, LogLine, RunInfo, parse_record
from remote.link.retry import Backoff, reraise_fatal
from remote.link.transport import OutputLine, RemoteProcess, Transport
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.traceback_fold import MARK_BYTES, TracebackFolder

# Stream restarts in a row that delivered nothing before the tail gives up (the transport does
# its own reconnect backoff; this only stops a loop on a helper that keeps failing).
MAX_IDLE_RESTARTS = 60
# Lines of a received block published (and recorded) as one batch: one write per batch, and a
# SIGKILL loses at most the batch being written. Small enough that a consumer that stalls (a
# printer writing to a pipe nobody reads) leaves the recorder at most one batch behind. Events
# and LogLines are structs the cyclic GC does not track (gc=False), so the batch size no longer
# matters to the collector.
BATCH_LINES = 256
# Resolve-and-upload attempts after dropped connections before `Jobs` gives up.
PREPARE_RETRIES = 20

class Jobs:
    def __init__(
        self,
        transport: Transport,
        workdir: str,
        *,
        host: str = "",
        bus: EventBus | None = None,
        python: str = "python3",
        cursors: CursorStore | None = None,
    ) -> None:
        self.transport = transport
        self.workdir = workdir
        self.host = host or getattr(transport, "name", "")
        self.bus = bus
        self.python = python
        self.cursors = cursors
        self._root: str | None = None
        self._helper: str | None = None
        self._ready_lock = asyncio.Lock()
        self._names: dict[str, str] = {}
        self._serve: tuple[RemoteProcess, AsyncIterator[OutputLine]] | None = None
        self._serve_lock = asyncio.Lock()

    # -- box-side setup -------------------------------------------------------------------

    async def _ready(self) -> tuple[str, str]:
        """Resolve the workdir (`~` means the box user's home) and upload the helper once.

        Both steps are idempotent (a resolve reads; the upload is content-hashed and renamed
        into place), so a connection dropped while they run is simply retried, as the other
        idempotent helper commands are. A host-key or auth failure is not a drop: it ends here."""
        async with self._ready_lock:
            backoff = Backoff(f"preparing {self.workdir} on {self.host}", limit=PREPARE_RETRIES)
            while self._root is None or self._helper is None:
                try:
                    self._root, self._helper = await install_helper(
                        self.transport, self.workdir, python=self.python, bus=self.bus,
                        host=self.host)
                except (ConnectionFailed, Dropped) as exc:
                    await backoff.failed(exc)  # host key / auth / config: raised at once
            return self._root, self._helper

    def _run_dir(self, root: str, run_id: str) -> str:
        if not run_id or "/" in run_id or run_id in (".", ".."):
            raise JobNotFound(f"not a run id: {run_id!r}")
        return posixpath.join(root, "runs", run_id)

    async def _served(self, *args: str, retry: bool = True) -> tuple[int, str]:
        """(rc, stdout) of a quick helper command, through one long-lived `serve` process.

        A request that might have had an effect (launch) is not sent twice: without `retry`, a
        connection lost after sending raises ConnectionFailed."""
        _, helper = await self._ready()
        async with self._serve_lock:
            backoff = Backoff(f"{args[0]} on {self.host}", limit=MAX_IDLE_RESTARTS)
            while True:
                sent = False
                try:
                    if self._serve is None:
                        proc = await self.transport.start([self.python, helper, "serve"])
                        self._serve = (proc, proc.lines())
                    proc, lines = self._serve
                    await proc.write((json.dumps(list(args)) + "\n").encode())
                    sent = True
                    while True:
                        line = await anext(lines)
                        if line.stream == "stdout":
                            break
                except (ConnectionFailed, StopAsyncIteration, OSError) as exc:
                    await self._close_serve()
                    reraise_fatal(exc)
                    if (sent and not retry) or backoff.failures >= MAX_IDLE_RESTARTS:
                        raise ConnectionFailed(f"{args[0]} on {self.host}: the connection was "
                                               f"lost ({exc or type(exc).__name__}); "
                                               "check with `console jobs`") from None
                    await backoff.failed(exc)
                    continue
                try:
                    reply = json.loads(line.text)
                    return int(reply["rc"]), str(reply.get("out") or reply.get("error") or "")
                except (ValueError, KeyError, TypeError):
                    await self._close_serve()
                    raise JobHelperError(f"{args[0]}: the box printed {line.text[:200]!r}, "
                                         "not a reply") from None

    async def _close_serve(self) -> None:
        serve, self._serve = self._serve, None
        await _close_quietly(serve[0] if serve is not None else None)

    async def close(self) -> None:
        """End the helper session on the box (it also ends by itself when the transport closes)."""
        async with self._serve_lock:
            await self._close_serve()

    def _emit(self, kind: str, **payload: object) -> None:
        if self.bus is not None:
            self.bus.emit(kind, self.host, **payload)

    # -- operations -----------------------------------------------------------------------

    async def launch(
        self,
        argv: Sequence[str],
        *,
        name: str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> RunInfo:
        if not argv:
            raise UsageError("nothing to launch: empty command")
        if not name:
            raise UsageError("a run needs a name")
        for key in env or {}:
            if not key or "=" in key or not key.replace("_", "a").isalnum():
                raise UsageError(f"invalid environment variable name: {key!r}")
        name = launch_name(name, self.bus)  # masked before the box makes an id of it
        root, _ = await self._ready()
        rc, out = await self._served(
            "launch", posixpath.join(root, "runs"), posixpath.join(root, "locks"), name, cwd or "",
            json.dumps(dict(env or {})), *argv, retry=False,
        )
        lines = out.strip().splitlines()
        if rc == EXIT_LOCKED:
            holder = parse_record(lines[-1], "launch") if lines else {}
            raise JobLocked(name, str(holder.get("run_id", "")), self.host)
        if rc != 0 or not lines:
            raise RemoteCommandError(["job_helper", "launch"], rc, out)
        info = RunInfo.from_dict(parse_record(lines[-1], "launch"))
        self._names[info.run_id] = info.name
        self._emit(ev.JOB_STARTED, run_id=info.run_id, name=info.name, argv=info.argv,
                   pid=info.pid, log=info.log_path,
                   summary=f"started {info.name} ({info.run_id}, pid {info.pid})")
        return info

    async def status(self, run_id: str) -> RunInfo:
        root, _ = await self._ready()
        rc, out = await self._served("status", self._run_dir(root, run_id))
        lines = out.strip().splitlines()
        if rc != 0 or not lines:
            raise RemoteCommandError(["job_helper", "status"], rc, out)
        info = self._run_info(lines[-1], "status", run_id)
        self._names[info.run_id] = info.name
        return info

    async def list(self) -> builtins.list[RunInfo]:
        root, _ = await self._ready()
        rc, out = await self._served("list", posixpath.join(root, "runs"))
        if rc != 0:
            raise RemoteCommandError(["job_helper", "list"], rc, out)
        runs = [RunInfo.from_dict(parse_record(line, "list"))
                for line in out.splitlines() if line.strip()]
        self._names.update((info.run_id, info.name) for info in runs)
        return runs

    async def _name(self, run_id: str) -> str:
        if run_id not in self._names:
            await self.status(run_id)
        return self._names[run_id]

    async def tail(self, run_id: str, *, offset: int = 0,
                   follow: bool = True) -> AsyncGenerator[LogLine, None]:
        """Lines from `offset` on; with follow, until the job ended and its log is drained.

        An async generator: close it (contextlib.aclosing) to save the cursor at once."""
        root, helper = await self._ready()
        run_dir = self._run_dir(root, run_id)
        name = await self._name(run_id)
        published = offset
        backoff = Backoff(f"the log stream of {run_id} on {self.host}", limit=MAX_IDLE_RESTARTS)
        bus, host = self.bus, self.host
        # Saved before the first line, so the cursor names the session recording this tail even
        # if the console dies before the first batch is done.
        self._save(run_id, offset)
        # Tracebacks reach the bus folded to one line each; the lines yielded below stay raw.
        folder = TracebackFolder(posixpath.join(run_dir, "log"), offset)
        try:
            while True:
                argv = [self.python, helper, "tail", run_dir, str(offset), "1" if follow else "0"]
                proc: RemoteProcess | None = None
                buf = bytearray()
                control = bytearray()
                progressed = False
                dropped = False
                rc: int | None = None
                try:
                    proc = await self.transport.start(argv)
                    # stdin stays open: the helper takes its EOF as "the console went away".
                    async for stream, data in proc.chunks():
                        if stream != "stdout":
                            control += data
                            continue
                        buf += data
                        cut = buf.rfind(b"\n") + 1
                        if not cut:
                            continue
                        block = bytes(buf[:cut])
                        del buf[:cut]
                        progressed = True
                        # One timestamp per block: its lines arrived together, and it keeps
                        # the per-line cost (event + recorder) low for fast logs.
                        ts = ev.utc_now()
                        texts, ends = split_lines(block, offset)
                        offset = ends[-1]
                        has_records = RECORD in block
                        fold = folder.active or MARK_BYTES in block
                        for i in range(0, len(texts), BATCH_LINES):
                            part, part_ends = texts[i : i + BATCH_LINES], ends[i : i + BATCH_LINES]
                            if fold:
                                shown, shown_ends = folder.feed(part, part_ends)
                            else:
                                shown, shown_ends = part, part_ends
                                folder.passed(part_ends[-1])
                            found = stage_events(host, run_id, name, shown, shown_ends, ts
                                                 ) if has_records else {}
                            if bus is None or not shown:
                                pass
                            elif found:
                                publish_with_stages(bus, host, run_id, name, shown, shown_ends,
                                                    ts, found)
                            else:
                                # One batch: the recorder writes it with one write.
                                bus.publish_many(ev.JobLines(host, run_id, name, shown,
                                                             shown_ends, ts))
                            for text, at in zip(part, part_ends, strict=True):
                                published = at
                                yield LogLine(text, at, found.get(at))
                        self._save(run_id, published)
                    rc = await proc.wait()
                except ConnectionFailed as exc:
                    reraise_fatal(exc)  # a changed host key ends the tail now, loudly
                    dropped = True
                finally:
                    await _close_quietly(proc)
                end = trailer(bytes(control))
                if end is not None and not dropped and int(end.get("end", -1)) == offset + len(buf):
                    if buf:  # the job's last line had no newline
                        offset += len(buf)
                        last = LogLine(bytes(buf).decode("utf-8", "replace"), offset)
                        for text, at in zip(*folder.feed([last.text], [offset]), strict=True):
                            self._emit(ev.JOB_LINE, run_id=run_id, name=name, text=text, offset=at)
                        published = offset
                        yield last
                    return  # what the folder still holds is said below
                if "ERROR" in control.decode("utf-8", "replace") and not dropped:
                    raise JobNotFound(f"no run {run_id!r} on {self.host or 'the box'}")
                if not dropped and rc is not None and rc != 0 and self.transport.connected:
                    raise RemoteCommandError(["job_helper", "tail"], rc,
                                             control.decode("utf-8", "replace"))
                # The stream ended early (connection dropped): resume from the last whole line.
                if progressed:
                    backoff.succeeded()
                else:
                    await backoff.failed()
        finally:
            # A tail stopped inside a traceback (detach, error): what was held, folded.
            for text, at in zip(*folder.flush(), strict=True):
                self._emit(ev.JOB_LINE, run_id=run_id, name=name, text=text, offset=at)
            self._save(run_id, published)

    def _save(self, run_id: str, offset: int) -> None:
        if self.cursors is not None:
            self.cursors.save(self.host, run_id, offset)

    async def _helper_retrying(self, *args: str) -> builtins.list[str]:
        """An idempotent helper command (`args`: its name and arguments), simply asked again
        after a dropped connection.

        Started with stdin left open: the helper exits when it sees stdin close, so a console
        that goes away leaves no waiter behind on the box."""
        _, helper = await self._ready()
        backoff = Backoff(f"{args[0]}: no answer from {self.host}", limit=MAX_IDLE_RESTARTS)
        while True:
            out = bytearray()
            err = bytearray()
            rc: int | None = None
            proc: RemoteProcess | None = None
            try:
                proc = await self.transport.start([self.python, helper, *args])
                async for stream, data in proc.chunks():
                    (out if stream == "stdout" else err).extend(data)
                rc = await proc.wait()
            except ConnectionFailed as exc:
                reraise_fatal(exc)
            finally:
                await _close_quietly(proc)
            lines = out.decode("utf-8", "replace").strip().splitlines()
            if rc == 0 and lines:
                return lines
            if rc not in (0, None) and self.transport.connected:
                raise RemoteCommandError(["job_helper", args[0]], rc,
                                         err.decode("utf-8", "replace"))
            await backoff.failed()

    async def wait(self, run_id: str) -> RunInfo:
        root, _ = await self._ready()
        lines = await self._helper_retrying("wait", self._run_dir(root, run_id))
        info = self._run_info(lines[-1], "wait", run_id)
        self._emit_exit(info)
        return info

    async def cancel(self, run_id: str, *, grace: float = 10.0) -> RunInfo:
        """Stop a run; returns once its name can be launched again. Raises CancelRefused when the
        box found the run's pid naming something else than its job (nothing was signalled), and
        NameHeld when the run ended but its supervisor kept the name past the wait."""
        root, _ = await self._ready()
        lines = await self._helper_retrying("cancel", self._run_dir(root, run_id), str(float(grace)))
        data = parse_record(lines[-1], "cancel")
        refused, held = data.pop("refused", None), data.pop("held", None)
        if refused:
            raise CancelRefused(f"cancel {run_id} on {self.host or 'the box'}: {refused}")
        info = self._run_info(json.dumps(data), "cancel", run_id)
        if info.done:
            self._emit_exit(info)
        if held:
            raise NameHeld(f"cancel {run_id} on {self.host or 'the box'}: {held}")
        return info

    def _run_info(self, line: str, what: str, run_id: str) -> RunInfo:
        data = parse_record(line, what)
        if data.get("error") == "unknown":
            raise JobNotFound(f"no run {run_id!r} on {self.host or 'the box'}")
        return RunInfo.from_dict(data)

    def _emit_exit(self, info: RunInfo) -> None:
        rc = "" if info.returncode is None else f", returncode {info.returncode}"
        self._emit(ev.JOB_EXIT, run_id=info.run_id, name=info.name, state=info.state,
                   returncode=info.returncode, summary=f"{info.name} {info.state}{rc}")


async def _close_quietly(proc: RemoteProcess | None) -> None:
    """Release a helper's channel after its stream ended or broke: the channel may already be
    gone with the connection, and that is not an error worth more than the one that got us here."""
    if proc is not None:
        with suppress(Exception):
            await proc.close()
