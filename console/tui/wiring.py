"""Adapters from the controller's action calls to the operations layer (remote/ops/).

The TUI runs the same operations as the headless commands (probe and compat, patch with the
"plan changed since shown" check, stages, reattached tails); this module only adapts the
controller's keyword calls (transport=, host= (HostConfig), bus=, plus the action's own) and
imports each operation when called, so a build without one still runs (FeatureUnavailable,
"not available in this build"). No Textual here.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from console.tui.controller import FeatureUnavailable

# Kept for callers of the old name; the operation lives in remote/ops/pipeline.py.
PIPELINE_CONFIG_NAME = "pipeline.toml"


def _module(name: str, label: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise FeatureUnavailable(f"{label} is not available in this build ({name}: {exc})") from None


def _patch_ops() -> ModuleType:
    return _module("remote.ops.patch", "patcher")


def _pipeline_ops() -> ModuleType:
    return _module("remote.ops.pipeline", "pipeline runner")


async def patch_plan(*, transport: Any, host: Any, bus: Any) -> None:
    ops = _patch_ops()
    await ops.plan(ops.patcher(transport, host, bus))


async def patch_apply(*, transport: Any, host: Any, bus: Any, file: str,
                      shown: Sequence[Any] | None = None) -> None:
    """The operator confirmed in the Patch screen: apply, if a fresh plan is still the one the
    screen showed (`shown`: the patch.planned payloads it displayed), else refuse (exit 4)."""
    ops = _patch_ops()
    await ops.apply(ops.patcher(transport, host, bus), shown=shown)


async def patch_verify(*, transport: Any, host: Any, bus: Any, file: str) -> None:
    ops = _patch_ops()
    await ops.verify(ops.patcher(transport, host, bus))


async def patch_rollback(*, transport: Any, host: Any, bus: Any, file: str) -> None:
    ops = _patch_ops()
    await ops.rollback(ops.patcher(transport, host, bus))


async def jobs_reattach(*, transport: Any, host: Any, bus: Any) -> None:
    """On connect: announce the box's running jobs and tail their logs into the event stream."""
    await _module("remote.ops.pipeline", "detached jobs").reattach(transport, host, bus)


async def stage_cancel(*, transport: Any, host: Any, bus: Any, stage: str, run_id: str | None) -> None:
    """Cancel the run behind a stage (its process group on the box: TERM, then KILL)."""
    if not run_id:
        raise FeatureUnavailable(f"no run is known for stage {stage!r}: nothing to cancel")
    await _module("remote.ops.pipeline", "detached jobs").cancel(transport, host, bus, run_id)


async def probe(*, transport: Any, host: Any, bus: Any, probe: str, target: str | None = None) -> None:
    """env / model / compat, as `console probe` runs them; results arrive as probe.* events."""
    ops = _module("remote.ops.probes", "probe runner")
    if probe == "env":
        await ops.probe(transport, host, bus, "env")
        return
    if not target:
        raise FeatureUnavailable("the model and compat probes need a model path or an architecture name")
    if probe == "model":
        await ops.probe(transport, host, bus, "model", ops.model_args(target))
        return
    await ops.compat_check(transport, host, bus, ops.model_args(target))


async def start_stage(*, transport: Any, host: Any, bus: Any, stage: str) -> None:
    """Run one stage now (even if its manifest matches), tailing it into stage.* events."""
    ops = _pipeline_ops()
    runner, config = await ops.box_pipeline(transport, host, bus)
    await ops.start_stage(runner, config, stage)


async def resume(*, transport: Any, host: Any, bus: Any) -> None:
    """Every stage in order, skipping those whose manifest matches (what `console run` does)."""
    ops = _pipeline_ops()
    runner, config = await ops.box_pipeline(transport, host, bus)
    await ops.run_pipeline(runner, config)
