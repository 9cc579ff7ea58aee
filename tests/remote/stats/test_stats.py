"""Console side of live stats: events, bounded history, breaks and restarts, the command."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from console.printer import human_line
from remote.errors import ConnectionFailed, StatsError
from remote.link.hosts import HostConfig, default_local
from remote.link.transport import LocalTransport, RemoteProcess
from remote.ops.stats import stream as stream_stats
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from remote.stats.samples import sample_payload, summary_line
from remote.stats.stream import StatsStream
from tests.local_box import local_console_toml


def _events(bus: EventBus) -> list[Event]:
    seen: list[Event] = []
    bus.add_callback(seen.append)
    return seen

async def _local_stream(tmp_path: Path, **options: Any) -> tuple[EventBus, list[Event], StatsStream]:
    """The stream on `local` (the real sampler, a workdir under tmp_path), its events recorded."""
    bus = EventBus()
    seen = _events(bus)
    t = LocalTransport()
    await t.connect()
    return bus, seen, StatsStream(t, default_local(str(tmp_path)), bus, **options)



def _payload(t: float, gpus: int = 8) -> dict[str, Any]:
    return sample_payload({
        "type": "sample", "t": t, "source": "nvml",
        "host": {"cpu": 12.5, "mem_used": 2**33, "mem_total": 2**35, "load1": 0.5},
        "gpus": [{"index": i, "name": "H200", "util": float(t % 100), "mem_used": 2**36,
                  "mem_total": 2**37, "power": 300.0, "power_limit": 700.0, "temp": 60.0,
                  "sm_clock": 1980.0, "pcie_tx": 1e9, "pcie_rx": 2e9, "procs": []}
                 for i in range(gpus)],
    })


def test_sample_payload_shape_and_rejections() -> None:
    p = _payload(1.0, gpus=1)
    assert set(p) >= {"source", "host", "gpus"} and p["host"]["load1"] == 0.5
    assert p["gpus"][0]["pcie_rx"] == 2e9
    assert "gpu0 1% 64.0/128.0G 300W 60C" in summary_line(p)
    with pytest.raises(ValueError, match="host"):
        sample_payload({"type": "sample", "gpus": []})
    with pytest.raises(ValueError, match=r"gpu0\.util"):
        sample_payload({"host": {}, "gpus": [{"index": 0, "util": "high"}]})
    with pytest.raises(ValueError, match="index"):
        sample_payload({"host": {}, "gpus": [{"util": 1}]})
    with pytest.raises(ValueError, match="source"):
        sample_payload({"host": {}, "gpus": [], "source": "rocm"})
    # reason travels with samples that lack NVML, so a replay seen mid-way still says why.
    assert sample_payload({"host": {}, "source": "none"}, reason="no driver")["reason"] == "no driver"


async def test_stream_publishes_samples_from_the_real_sampler(tmp_path: Path) -> None:
    _, seen, stream = await _local_stream(tmp_path, interval=0.1)
    assert await stream.run(count=3) == 3
    samples = [e for e in seen if e.kind == ev.STATS_SAMPLE]
    assert len(samples) == 3 and all(e.host == "local" for e in samples)
    assert [e.payload["seq"] for e in samples] == [0, 1, 2]
    assert samples[0].payload["source"] == "none" and "nvidia-smi" in samples[0].payload["reason"]
    # the reason is sent once, when it changes, not with every sample
    assert not any("reason" in e.payload for e in samples[1:])
    warnings = [e for e in seen if e.kind == ev.CONSOLE_WARNING]
    assert len(warnings) == 1 and "no GPU stats" in warnings[0].payload["message"]
    assert (tmp_path / "probes" / "sampler.py").is_file()
    # The event round-trips through the session format.
    assert Event.from_json(samples[0].to_json()).payload == samples[0].payload


def _signal_sampler(stream: StatsStream, sig: signal.Signals, sent: list[int]) -> None:
    """Send the running sampler `sig` (a kill, a freeze) and note its pid in `sent`."""
    assert stream.sampler_pid is not None
    os.kill(stream.sampler_pid, sig)
    sent.append(stream.sampler_pid)


async def test_stream_restarts_when_the_sampler_dies(tmp_path: Path) -> None:
    bus, seen, stream = await _local_stream(tmp_path, interval=0.1, backoff_initial=0.1)
    killed: list[int] = []

    def kill_after_two(event: Event) -> None:
        if event.kind == ev.STATS_SAMPLE and stream.samples == 2 and not killed:
            _signal_sampler(stream, signal.SIGKILL, killed)

    bus.add_callback(kill_after_two)
    assert await stream.run(count=5, duration=60) == 5
    kinds = [e.kind for e in seen]
    broke = [e for e in seen if e.kind == ev.CONSOLE_WARNING and "broke" in e.payload["message"]]
    assert len(broke) == 1 and "exited -9" in broke[0].payload["message"]
    restarted = [e for e in seen if e.kind == ev.CONSOLE_INFO and "restarted" in e.payload["message"]]
    assert len(restarted) == 1
    assert kinds.index(ev.CONSOLE_WARNING, kinds.index(ev.STATS_SAMPLE)) < len(kinds)
    assert stream.sampler_pid != killed[0] and stream.restarts == 1
    # The no-GPU reason was told once, not again on restart.
    assert sum("no GPU stats" in e.payload.get("message", "") for e in seen) == 1


async def test_stream_restarts_after_a_stall(tmp_path: Path) -> None:
    bus, seen, stream = await _local_stream(tmp_path, interval=0.1, backoff_initial=0.1,
                                            stall_seconds=2.0, stall_intervals=1)
    stopped: list[int] = []

    def freeze(event: Event) -> None:
        if event.kind == ev.STATS_SAMPLE and stream.samples == 1 and not stopped:
            _signal_sampler(stream, signal.SIGSTOP, stopped)
        elif event.kind == ev.CONSOLE_WARNING and stopped:
            # Reap the frozen one while the loop runs (its pipes close with it, not at GC).
            os.kill(stopped[0], signal.SIGKILL)

    bus.add_callback(freeze)
    try:
        assert await stream.run(count=3, duration=60) == 3
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert any("no output for" in e.payload.get("message", "") for e in seen)


def _sampler_pids(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline and "sampler.py" in cmdline:
                pids.append(int(proc.name))
    return pids


async def test_stream_stats_as_the_tui_runs_it_stops_the_sampler_on_cancel(tmp_path: Path
                                                                           ) -> None:
    bus = EventBus()
    seen = _events(bus)
    t = LocalTransport()
    await t.connect()
    host = default_local(str(tmp_path / "tui-box"))
    task = asyncio.create_task(stream_stats(t, host, bus, interval=0.1))
    for _ in range(600):
        if sum(e.kind == ev.STATS_SAMPLE for e in seen) >= 2:
            break
        await asyncio.sleep(0.05)
    pids = _sampler_pids(str(tmp_path / "tui-box"))
    assert len(pids) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if not _sampler_pids(str(tmp_path / "tui-box")):
            break
        await asyncio.sleep(0.05)
    assert _sampler_pids(str(tmp_path / "tui-box")) == []


class FlakyTransport(LocalTransport):
    """Test double for the SSH transport's reconnect behaviour: its first start() fails the
    way the SSH transport does when the connection is gone (ConnectionFailed, not connected),
    and connect() brings it back."""

    def __init__(self) -> None:
        super().__init__("flaky")
        self.failures = 1
        self.connects = 0

    async def connect(self) -> None:
        self.connects += 1
        await super().connect()

    async def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
                    ) -> RemoteProcess:
        if self.failures and "--watch-stdin" in argv:
            self.failures -= 1
            await super().close()
            raise ConnectionFailed("connection to flaky lost")
        return await super().start(argv, env=env)


async def test_stream_reconnects_after_connection_failed(tmp_path: Path) -> None:
    bus = EventBus()
    seen = _events(bus)
    t = FlakyTransport()
    await t.connect()
    host = HostConfig(name="flaky", ssh=None, python=default_local().python, workdir=str(tmp_path))
    stream = StatsStream(t, host, bus, interval=0.1, backoff_initial=0.05)
    assert await stream.run(count=2, duration=60) == 2
    warn = [e for e in seen if e.kind == ev.CONSOLE_WARNING and "broke" in e.payload["message"]]
    assert len(warn) == 1 and "connection to flaky lost" in warn[0].payload["error"]
    assert t.connects == 2


async def test_sampler_that_cannot_start_is_an_error_not_a_restart_loop(tmp_path: Path) -> None:
    """A box python that runs the upload helpers (`-c`) but cannot run the sampler."""
    wrapper = tmp_path / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-c" ]; then exec {default_local().python} "$@"; fi\n'
        'echo "sampler cannot start: /proc is not mounted" >&2\n'
        "exit 3\n"
    )
    wrapper.chmod(0o755)
    bus = EventBus()
    seen = _events(bus)
    t = LocalTransport()
    await t.connect()
    host = HostConfig(name="local", ssh=None, python=str(wrapper), workdir=str(tmp_path / "box"))
    stream = StatsStream(t, host, bus, interval=0.1)
    with pytest.raises(StatsError, match="exited 3 before its first sample: sampler cannot start"):
        await stream.run(duration=30)
    assert stream.restarts == 0 and not [e for e in seen if e.kind == ev.CONSOLE_WARNING]


async def test_malformed_sampler_output_becomes_an_error_event(tmp_path: Path) -> None:
    bus = EventBus()
    seen = _events(bus)
    stream = StatsStream(LocalTransport(), default_local(str(tmp_path)), bus)
    assert not stream._handle("Traceback (most recent call last):")
    assert not stream._handle('{"type": "sample", "host": {"cpu": "x"}}')
    assert stream._handle(json.dumps({"type": "sample", "host": {"cpu": 1.0}, "gpus": []}))
    errors = [e for e in seen if e.kind == ev.CONSOLE_ERROR]
    assert len(errors) == 2 and "host.cpu" in errors[1].payload["message"]
    assert [e.kind for e in seen].count(ev.STATS_SAMPLE) == 1


def _local_config(tmp_path: Path) -> Path:
    cfg = local_console_toml(tmp_path)
    return cfg


def test_console_stats_once_prints_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    rc = main(["stats", "--host", "local", "--once", "--interval", "0.1",
               "--config", str(_local_config(tmp_path)), "--no-record"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "local: cpu " in out and "gpu source: none" in out


def test_console_stats_json_streams_events_and_records(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    session = tmp_path / "s.jsonl"
    rc = main(["stats", "--host", "local", "--interval", "0.1", "--count", "3", "--json",
               "--config", str(_local_config(tmp_path)), "--session", str(session)])
    assert rc == 0
    printed = [Event.from_json(line) for line in capsys.readouterr().out.splitlines()]
    samples = [e for e in printed if e.kind == ev.STATS_SAMPLE]
    assert len(samples) == 3 and samples[0].payload["interval"] == 0.1
    # no per-sample text: the printer derives its line from the fields (issue 14/17)
    assert not {"print", "summary"} & {k for e in samples for k in e.payload}
    assert human_line(samples[0], show_stats=True).split(": ", 1)[1].startswith("cpu ")  # type: ignore[union-attr]
    assert human_line(samples[0]) is None  # other commands' printers stay quiet
    recorded = session.read_text().splitlines()[1:]
    assert sum('"stats.sample"' in line for line in recorded) == len(samples)


def test_console_stats_bad_interval_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--interval", "0", "--no-record"]) == 2
    assert "--interval must be at least" in capsys.readouterr().err

