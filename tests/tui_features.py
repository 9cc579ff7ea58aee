"""Stand-ins for controller tests (in place of remote/ops/probes.run and remote/ops/stats.stream,
with their signatures): a probe that runs a real command on the real transport and publishes its
result the way the probe runner does (probe.result {probe, result}), and a stats stream in the
sampler's shape."""

from __future__ import annotations

import sys
from typing import Any

from remote.spine import events as ev


async def run_probe(transport: Any, host: Any, bus: Any, probe: str, request: Any = None) -> None:
    done = await transport.run([sys.executable, "-c", "print('ok')"], timeout=30)
    bus.emit(ev.PROBE_RESULT, host.name, probe=probe,
             result={"returncode": done.returncode, "stdout": done.stdout.strip()})


async def stream_stats(transport: Any, host: Any, bus: Any, *, interval: float = 1.0,
                       alerts: Any = None) -> None:
    """Publishes stats.sample in the brief's shape until cancelled, like the stats sampler."""
    import asyncio

    i = 0
    while True:
        # publish, not emit: the payload's own "host" key would collide with emit's argument
        bus.publish(ev.Event(ev.STATS_SAMPLE, host.name, {
            "source": "none", "reason": "no NVIDIA GPU (test)",
            "host": {"cpu": 1.0, "mem_used": 1e9, "mem_total": 2e9, "load1": 0.1 * i}, "gpus": []}))
        i += 1
        await asyncio.sleep(0.01)
