"""Live stats over the real loopback sshd (runs once remote/link/ssh.py has landed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote.link.connect import make_transport
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from remote.stats.stream import StatsStream
from tests.sshd_harness import Sshd

pytestmark = pytest.mark.ssh


async def _connected(sshd: Sshd, tmp_path: Path) -> tuple[HostConfig, EventBus, list[Event], Transport]:
    """The box over the loopback sshd, connected, with every event its bus carries recorded."""
    host = sshd.host_config("box", workdir=str(tmp_path / "box"))
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)
    transport = make_transport(host, bus)
    await transport.connect()
    return host, bus, seen, transport


async def test_stats_stream_over_ssh(sshd: Sshd, tmp_path: Path) -> None:
    host, bus, seen, transport = await _connected(sshd, tmp_path)
    try:
        stream = StatsStream(transport, host, bus, interval=0.1)
        assert await stream.run(count=3, duration=60) == 3
    finally:
        await transport.close()
    samples = [e for e in seen if e.kind == ev.STATS_SAMPLE]
    assert len(samples) == 3 and samples[0].host == "box"
    assert samples[0].payload["host"]["mem_total"] > 0


@pytest.mark.slow
async def test_stats_stream_restarts_after_a_network_drop(sshd: Sshd, tmp_path: Path) -> None:
    host, bus, seen, transport = await _connected(sshd, tmp_path)
    stream = StatsStream(transport, host, bus, interval=0.1, backoff_initial=0.2)
    dropped: list[int] = []

    def drop_after_three(event: Event) -> None:
        if event.kind == ev.STATS_SAMPLE and stream.samples == 3 and not dropped:
            dropped.append(sshd.drop_connections())

    bus.add_callback(drop_after_three)
    try:
        assert await stream.run(count=6, duration=120) == 6
    finally:
        await transport.close()
    assert dropped and dropped[0] > 0
    kinds = [e.kind for e in seen]
    first_sample = kinds.index(ev.STATS_SAMPLE)
    broke = [i for i, e in enumerate(seen)
             if e.kind == ev.CONSOLE_WARNING and "broke" in e.payload.get("message", "")]
    assert broke and broke[0] > first_sample
    assert kinds[broke[0]:].count(ev.STATS_SAMPLE) == 3  # the rest came after the restart
    assert stream.restarts >= 1


def test_console_stats_once_over_ssh(sshd: Sshd, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from console.cli import main

    h = sshd.host_config("box", workdir=str(tmp_path / "box"))
    cfg = sshd.console_toml(tmp_path / "console.toml", python=h.python, workdir=h.workdir)
    rc = main(["stats", "--host", "box", "--once", "--interval", "0.1", "--config", str(cfg),
               "--no-record"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "box: cpu " in out and "gpu source: none" in out
