"""Live GPU and host stats, as `console stats` and the TUI's stats strip run them.

The stream is the operation: one sampler process on the box, samples published as
stats.sample events. The CLI's `--once` and the TUI's endless strip are two ways to end it.
"""

from __future__ import annotations

from typing import Any

from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.stats.alerts import AlertConfig
from remote.stats.stream import StatsStream


async def stream(transport: Transport, host: HostConfig, bus: EventBus, *,
                 interval: float = 1.0, source: str = "auto", duration: float | None = None,
                 count: int | None = None, alerts: dict[str, float] | None = None) -> int:
    """Samples until `duration`/`count` (or cancelled); returns how many were published, with
    the alerts the thresholds `alerts` (console.toml's [alerts], Config.alerts) raise.
    Cancelling closes the sampler's stdin, so the sampler on the box exits too."""
    s = StatsStream(transport, host, bus, interval=interval, source=source,
                    alerts=AlertConfig.of(alerts))
    return await s.run(duration=duration, count=count)


def serve_prometheus(bus: EventBus, port: int, addr: str = "127.0.0.1") -> Any:
    """The bus's live samples as Prometheus text at http://addr:port/metrics (a thread of
    prometheus_client's; port 0: a free one), until its close(). No second connection and no
    sampler of its own: it reads the stats.sample events the streams publish. A port that
    cannot be listened on is a UsageError naming it."""
    from remote.errors import UsageError
    from remote.stats.exporter import PrometheusEndpoint

    try:
        return PrometheusEndpoint(bus, port, addr)
    except OSError as exc:
        raise UsageError(f"--prometheus {port}: cannot listen on {addr}:{port} "
                         f"({exc.strerror or exc})") from None


async def sample_once(transport: Transport, host: HostConfig, bus: EventBus, *,
                      interval: float = 1.0, source: str = "auto") -> dict[str, Any] | None:
    """One sample's payload (also published as a stats.sample event), or None when the box
    gave none in max(30 s, 10 intervals)."""
    last: list[dict[str, Any]] = []
    remove = bus.add_callback(
        lambda e: last.append(e.payload) if e.kind == ev.STATS_SAMPLE else None)
    try:
        got = await stream(transport, host, bus, interval=interval, source=source, count=1,
                           duration=max(30.0, 10 * interval))
    finally:
        remove()
    return last[-1] if got and last else None

