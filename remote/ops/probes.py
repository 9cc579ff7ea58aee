"""Probes and the compatibility advice, as the CLI (`console probe`) and the TUI run them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from remote import compat
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.probe_runner import run_probe, summarize
from remote.spine import events as ev
from remote.spine.bus import EventBus

VERSIONED = ("vllm", "speculators", "transformers")


def model_args(target: str | None = None, *, model: str | None = None, arch: str | None = None,
               vllm_root: str | None = None) -> list[str]:
    """The model probe's arguments. `target`: a path on the box (HF model dir or config.json)
    or an architecture name, as the TUI's one input field gives it."""
    out: list[str] = []
    if target:
        if "/" in target or target.endswith(".json"):
            model = model or target
        else:
            arch = arch or target
    if model:
        out += ["--model", model]
    if arch:
        out += ["--arch", arch]
    if vllm_root:
        out += ["--vllm-root", vllm_root]
    return out


async def probe(transport: Transport, host: HostConfig, bus: EventBus, name: str,
                args: Sequence[str] = (), *, timeout: float | None = None) -> list[dict[str, Any]]:
    """One probe (env, model, source); each result arrives as a probe.result event."""
    if name == "env" and not args:
        args = ["--workdir", host.workdir]
    extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    return list(await run_probe(transport, name, list(args), workdir=host.workdir,
                                python=host.python, bus=bus, host=host.name, **extra))


@dataclass
class CompatOutcome:
    architecture: Any
    findings: list[compat.Finding]

    @property
    def refused(self) -> bool:
        return any(f.severity == "error" for f in self.findings)


async def compat_check(transport: Transport, host: HostConfig, bus: EventBus,
                       model: Sequence[str], *, timeout: float | None = None
                       ) -> list[CompatOutcome]:
    """env + model probes, then the advice per model, published as probe.result (compat) events
    with every finding and its fix."""
    (env,) = await probe(transport, host, bus, "env", timeout=timeout)
    outcomes = []
    for found in await probe(transport, host, bus, "model", model, timeout=timeout):
        findings = compat.advise(env, found)
        result = {
            "architecture": found.get("architecture"),
            "versions": {k: (env.get("packages") or {}).get(k) for k in VERSIONED},
            "findings": [f.to_dict() for f in findings],
            "summary": compat.summarize(findings),
        }
        bus.emit(ev.PROBE_RESULT, host.name, probe="compat", result=result,
                 summary=f"{found.get('architecture')}: {summarize('compat', result)}")
        outcomes.append(CompatOutcome(found.get("architecture"), findings))
    return outcomes
