"""Probes, as the CLI (`console probe`, one host or a fleet) and the TUI run them: one route.

Which script, with which options, what a result reads as and what it means all come from the
probe's row (remote/probe_table.py); a name without a row is a usage error here, before anything
runs on the box.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from remote import probe_table
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.probe_runner import run_probe
from remote.probe_table import ProbeRequest, Verdict
from remote.spine import events as ev
from remote.spine.bus import EventBus


@dataclasses.dataclass
class ProbeOutcome:
    results: list[dict[str, Any]]
    verdict: Verdict


async def run(transport: Transport, host: HostConfig, bus: EventBus, name: str,
              request: ProbeRequest = ProbeRequest(), *, timeout: float | None = None
              ) -> ProbeOutcome:
    """Run probe `name` on one host: each result arrives as a probe.result event (a composed
    probe's parts too); its results and what they mean. UsageError for an unknown name or a
    request that lacks what the probe needs."""
    row = probe_table.get(name)
    missing = row.needs(request)
    if missing:
        from remote.errors import UsageError

        raise UsageError(missing)
    request = request._replace(workdir=request.workdir or host.workdir)
    extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}

    async def script(probe: str, args: Sequence[str]) -> list[dict[str, Any]]:
        return list(await run_probe(transport, probe, list(args), workdir=host.workdir,
                                    python=host.python, bus=bus, host=host.name, **extra))

    if row.compose is None:
        results = await script(name, row.options(request))
    else:
        results = await row.compose(script, request)
        for result in results:
            bus.emit(ev.PROBE_RESULT, host.name, probe=name, result=result,
                     summary=row.summary(result))
    return ProbeOutcome(results, row.verdict(results, request))
