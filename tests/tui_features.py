"""A stand-in remote feature for controller tests: runs a real command on the real transport
and publishes its result the way the probe runner will (probe.result {probe, result})."""

from __future__ import annotations

import sys
from typing import Any

from remote import events as ev


async def run_probe(*, transport: Any, host: Any, bus: Any, probe: str) -> None:
    done = await transport.run([sys.executable, "-c", "print('ok')"], timeout=30)
    bus.emit(ev.PROBE_RESULT, host.name, probe=probe,
             result={"returncode": done.returncode, "stdout": done.stdout.strip()})
