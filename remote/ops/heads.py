"""A draft checked against its target and the box's vLLM before any engine starts, as
`console probe head` and `console serve start` ask it.

The check itself is the head probe (remote/probes/head_probe.py, its row in
remote/probe_table.py): run with the python that would serve, it reads the head's config.json
and safetensors headers, the target's config.json and vLLM's source, never a tensor. A mismatch
is one line naming both values; `serve start` raises DraftRefused with them (exit 4) and
launches nothing, where vLLM would have died minutes into loading the target.

The target comes from `--target DIR`, or from a pipeline config (`--pipeline FILE`, `--demo`)
as the box resolves it (`python -m pipeline validate`, remote/ops/serve.py pipeline_target): its
`target.model`, and its own head, `<output_dir>/train/checkpoint` (what train's
speculative_config.json names).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from pipeline.stages import TRAIN
from remote.errors import DraftRefused
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.probe_runner import run_probe
from remote.probe_table import ProbeRequest, head_options
from remote.spine import events as ev
from remote.spine.bus import EventBus


@dataclass(frozen=True)
class PipelineTarget:
    config: str  # the pipeline config on the box
    model: str  # target.model, as the box resolved it
    head: str  # the pipeline's own head: <output_dir>/train/checkpoint


def target_from(config: str, resolved: dict[str, Any]) -> PipelineTarget:
    """`python -m pipeline validate`'s answer as the head check reads it."""
    out = str(resolved["output_dir"])
    return PipelineTarget(config=config, model=str(resolved["model"]),
                          head=posixpath.join(out, TRAIN, "checkpoint"))


async def check(transport: Transport, host: HostConfig, bus: EventBus, *, draft: str,
                target: str, pipeline_head: str, timeout: float = 600.0) -> dict[str, Any]:
    """The head probe for `draft` (pipeline: `pipeline_head`; a directory: itself; ngram: the
    build alone) with `host.python`, the python that will serve. Its result (a probe.result
    event), its warnings said; DraftRefused with every mismatch."""
    method = "ngram" if draft == "ngram" else "eagle3"  # as pipeline/serve.py draft_config serves it
    head = None if method == "ngram" else (pipeline_head if draft == "pipeline" else draft)
    request = ProbeRequest(model=target if head else None, head=head, method=method)
    (result,) = await run_probe(transport, "head", head_options(request), workdir=host.workdir,
                                python=host.python, bus=bus, host=host.name, timeout=timeout)
    for warning in result.get("warnings") or []:
        bus.emit(ev.CONSOLE_WARNING, host.name, message=str(warning))
    mismatches = [str(m) for m in result.get("mismatches") or []]
    if draft == "pipeline":  # the pipeline's own head not there yet: say what makes it
        mismatches = [f"no head at {head}: run the pipeline through train first (serve start "
                      "serves the head train wrote)" if m == f"{head}: no such head directory"
                      else m for m in mismatches]
    if mismatches:
        raise DraftRefused(mismatches)
    return dict(result)
