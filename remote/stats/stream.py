"""Live stats from the box: one long-lived sampler per host, its lines turned into events.

The sampler (remote/probes/sampler.py) is uploaded once and kept running over the host's one
connection; each JSON line it prints becomes a `stats.sample` event, so the TUI, the headless
printer and the session recorder all see the same samples (and a replay shows them again).
When the stream breaks (connection drop, sampler killed) the operator is told, and the sampler
is started again once the transport is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import posixpath
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote.errors import ConnectionFailed, RemoteError, StatsError
from remote.link import aio
from remote.link.hosts import HostConfig
from remote.link.retry import reraise_fatal
from remote.link.transport import OutputLine, RemoteProcess, Transport
from remote.link.upload import box_path, upload_probe
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from remote.stats.alerts import AlertConfig, AlertWatch
from remote.stats.limits import MIN_INTERVAL
from remote.stats.samples import sample_payload

SAMPLER = Path(__file__).resolve().parents[1] / "probes" / "sampler.py"
MAX_MALFORMED_REPORTS = 5


async def expand_remote_path(transport: Transport, python: str, path: str) -> str:
    try:
        return await box_path(transport, path, python)
    except RemoteError as exc:
        raise StatsError(str(exc)) from None


class _Broken(RemoteError):
    """The stream ended while we still wanted samples."""


@dataclass
class StatsStream:
    """Keeps one sampler running on a host and publishes its samples until told to stop."""

    transport: Transport
    host: HostConfig
    bus: EventBus
    interval: float = 1.0
    source: str = "auto"
    # The alert rules judge each sample here, where it is made: every front end and the session
    # get the same stats.alert events, and a replay shows them without judging again.
    alerts: AlertConfig = field(default_factory=AlertConfig)
    watch: AlertWatch | None = None
    backoff_initial: float = 0.5
    backoff_max: float = 10.0
    # No line for this long (and at least `stall_intervals` intervals) means a dead stream.
    stall_seconds: float = 15.0
    stall_intervals: int = 10
    samples: int = 0
    restarts: int = 0
    sampler_pid: int | None = None
    _reason_told: str | None = None
    _reason_sent: str | None = None  # the reason the last sample carried (sent once per change)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _remote_path: str | None = None
    _malformed: int = 0

    def __post_init__(self) -> None:
        if not self.interval >= MIN_INTERVAL:
            raise ValueError(f"interval must be at least {MIN_INTERVAL} s")
        if self.watch is None:
            self.watch = AlertWatch(self.alerts)

    def _on_event(self, event: Event) -> None:
        """The host's stage events, for the stage-stalled rule (the bus calls this)."""
        if event.host == self.name and event.kind.startswith("stage.") and self.watch is not None:
            self.watch.stage(event.kind, event.payload, event.ts.timestamp())

    @property
    def name(self) -> str:
        return self.host.name

    def stop(self) -> None:
        self._stop.set()

    async def prepare(self) -> str:
        """Upload the sampler and the module it shares with the env probe (each skipped when
        unchanged) and return its path on the box."""
        workdir = await expand_remote_path(self.transport, self.host.python, self.host.workdir)
        remote = posixpath.join(workdir, "probes", "sampler.py")
        await upload_probe(self.transport, SAMPLER, remote, python=self.host.python, bus=self.bus,
                     host=self.name)
        return remote

    def argv(self, remote_path: str) -> list[str]:
        return [self.host.python, "-u", remote_path, "--interval", repr(float(self.interval)),
                "--source", self.source, "--watch-stdin"]

    async def run(self, *, duration: float | None = None, count: int | None = None) -> int:
        """Publish samples until `duration` seconds pass, `count` samples arrive or stop().
        Returns the number of samples published."""
        loop = asyncio.get_running_loop()
        deadline = None if duration is None else loop.time() + duration
        first = self.samples
        target = None if count is None else first + count
        delay = self.backoff_initial
        remove = self.bus.add_callback(self._on_event)
        try:
            while not self._stop.is_set():
                started = self.samples
                try:
                    if not self.transport.connected:
                        await self.transport.connect()
                    if self._remote_path is None:
                        self._remote_path = await self.prepare()
                    proc = await self.transport.start(self.argv(self._remote_path))
                    await self._pump(proc, deadline, target)
                    break
                except (_Broken, ConnectionFailed, OSError, EOFError) as exc:
                    reraise_fatal(exc)  # a changed host key or refused login: no stats to wait for
                    if self._stop.is_set():
                        break
                    if self.samples > started:
                        delay = self.backoff_initial  # it worked for a while: a fresh break
                    self.restarts += 1
                    self.bus.emit(ev.CONSOLE_WARNING, self.name,
                                  message=f"stats stream from {self.name} broke ({_why(exc)}); "
                                  f"restarting in {delay:.1f}s",
                                  error=_why(exc), delay=delay, attempt=self.restarts)
                    if deadline is not None and loop.time() + delay >= deadline:
                        break
                    with contextlib.suppress(TimeoutError):
                        await aio.wait_for(self._stop.wait(), delay)
                    delay = min(delay * 2, self.backoff_max)
            return self.samples - first
        finally:
            remove()

    async def _pump(self, proc: RemoteProcess, deadline: float | None, target: int | None) -> None:
        """Read the sampler until done (returns) or the stream breaks (raises _Broken)."""
        loop = asyncio.get_running_loop()
        stall = max(self.stall_seconds, self.stall_intervals * self.interval)
        stderr: deque[str] = deque(maxlen=20)
        got_any = False
        lines: AsyncIterator[OutputLine] = proc.lines()
        stopper = asyncio.ensure_future(self._stop.wait())
        nxt: asyncio.Future[OutputLine] | None = None
        try:
            while True:
                if target is not None and self.samples >= target:
                    return
                timeout = stall
                if deadline is not None:
                    left = deadline - loop.time()
                    if left <= 0:
                        return
                    timeout = min(timeout, left)
                nxt = asyncio.ensure_future(anext(lines))
                done, _ = await asyncio.wait({nxt, stopper}, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if stopper in done:
                    nxt.cancel()
                    return
                if not done:
                    nxt.cancel()
                    if deadline is not None and loop.time() >= deadline:
                        return
                    raise _Broken(f"no output for {stall:.0f}s")
                try:
                    line = nxt.result()
                except StopAsyncIteration:
                    rc = await _wait_rc(proc)
                    tail = stderr[-1] if stderr else ""
                    if not got_any and self.transport.connected and rc not in (None, -9, -15):
                        raise StatsError(
                            f"sampler on {self.name} exited {rc} before its first sample"
                            + (f": {tail}" if tail else "")
                        ) from None
                    raise _Broken(f"sampler exited {rc}" + (f": {tail}" if tail else "")) from None
                if line.stream == "stderr":
                    stderr.append(line.text)
                    continue
                if self._handle(line.text):
                    got_any = True
        finally:
            stopper.cancel()
            if nxt is not None and not nxt.done():
                nxt.cancel()
                await asyncio.wait({nxt}, timeout=1)  # let the reader unwind; raises nothing
            with contextlib.suppress(OSError, ConnectionFailed, EOFError, TimeoutError,
                                     RuntimeError):
                await proc.close_stdin()  # --watch-stdin: the sampler exits on EOF
                # Read to the end so the pipes/channel close with the process, not at GC.
                await aio.wait_for(_drain(lines), 2)
            with contextlib.suppress(OSError, ConnectionFailed, EOFError):
                await _wait_rc(proc, 2)
                await proc.close()
            aclose = getattr(lines, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(RuntimeError, OSError, ConnectionFailed):
                    await aclose()

    def _handle(self, text: str) -> bool:
        """One stdout line; True when it was a sample."""
        try:
            obj = json.loads(text)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            kind = obj.get("type")
            if kind == "sample":
                reason = self._reason_told if self._reason_told != self._reason_sent else None
                payload = sample_payload(obj, reason=reason)
                if "reason" in payload:
                    self._reason_sent = reason
            elif kind == "start":
                self._on_start(obj)
                return False
            elif kind == "error":
                self.bus.emit(ev.CONSOLE_WARNING, self.name,
                              message=f"sampler: {obj.get('message', '?')}")
                return False
            else:
                raise ValueError(f"unknown line type {kind!r}")
        except ValueError as exc:
            self._malformed += 1
            if self._malformed <= MAX_MALFORMED_REPORTS:
                more = " (further malformed lines not reported)" \
                    if self._malformed == MAX_MALFORMED_REPORTS else ""
                self.bus.emit(ev.CONSOLE_ERROR, self.name,
                              message=f"malformed sampler output ({exc}): {text[:120]!r}{more}")
            return False
        payload["interval"] = self.interval
        self.samples += 1
        # The text a printer shows is derived from the fields (console/printer.py), not sent.
        event = self.bus.publish(Event(ev.STATS_SAMPLE, self.name, payload))
        if self.watch is not None:
            for alert in self.watch.sample(payload, event.ts.timestamp()):
                self.bus.emit(ev.STATS_ALERT, self.name, **alert)
        return True

    def _on_start(self, obj: dict[str, Any]) -> None:
        pid = obj.get("pid")
        self.sampler_pid = pid if isinstance(pid, int) else None
        source = str(obj.get("source", "none"))
        reason = obj.get("reason")
        if self.restarts:
            self.bus.emit(ev.CONSOLE_INFO, self.name,
                          message=f"stats stream from {self.name} restarted (sampler pid {pid})")
        if reason and reason != self._reason_told:
            self._reason_told = str(reason)
            what = "no GPU stats" if source == "none" else f"GPU stats from {source}"
            self.bus.emit(ev.CONSOLE_WARNING, self.name, message=f"{what}: {reason}",
                          source=source, reason=reason)


async def _drain(lines: AsyncIterator[OutputLine]) -> None:
    async for _ in lines:
        pass


async def _wait_rc(proc: RemoteProcess, timeout: float = 5) -> int | None:
    try:
        return await aio.wait_for(proc.wait(), timeout)
    except (TimeoutError, OSError, ConnectionFailed, EOFError):
        return None


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
