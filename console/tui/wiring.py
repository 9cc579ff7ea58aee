"""Adapters from the controller's action calls to the remote modules that do the work.

Each adapter imports its module when called, so the TUI builds and runs without it; a missing
module becomes FeatureUnavailable ("not available in this build"). Adapters take keyword
arguments transport=, host= (HostConfig), bus= and the action's own. No Textual here.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from console.tui.controller import FeatureUnavailable


def _module(name: str, label: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise FeatureUnavailable(f"{label} is not available in this build ({name}: {exc})") from None


def _patcher(transport: Any, host: Any, bus: Any) -> Any:
    runner = _module("remote.patcher.runner", "patcher")
    return runner.Patcher(transport, host, bus)


async def patch_plan(*, transport: Any, host: Any, bus: Any) -> None:
    await _patcher(transport, host, bus).plan()


async def patch_apply(*, transport: Any, host: Any, bus: Any, file: str) -> None:
    """The operator confirmed in the Patch screen; the patcher plans again and writes every
    file its recipes target (it works per package, not per file)."""
    await _patcher(transport, host, bus).apply(emit_plan=False)


async def patch_verify(*, transport: Any, host: Any, bus: Any, file: str) -> None:
    await _patcher(transport, host, bus).verify()


async def patch_rollback(*, transport: Any, host: Any, bus: Any, file: str) -> None:
    await _patcher(transport, host, bus).rollback()


def _jobs(transport: Any, host: Any, bus: Any) -> Any:
    mod = _module("remote.jobs", "detached jobs")
    return mod.Jobs(transport, host.workdir, host=host.name, bus=bus, python=host.python)


async def jobs_reattach(*, transport: Any, host: Any, bus: Any) -> None:
    """On connect: announce the box's running jobs and tail their logs into the event stream
    (the box keeps its own truth; the jobs module emits job.line/job.exit as it reads)."""
    import asyncio
    from contextlib import aclosing

    from remote import events as ev

    jobs = _jobs(transport, host, bus)

    async def drain(run_id: str) -> None:
        async with aclosing(jobs.tail(run_id, offset=0, follow=True)) as lines:
            async for _ in lines:
                pass
        await jobs.wait(run_id)  # the tail ends with the run; this says how (job.exit)

    try:
        running = [info for info in await jobs.list() if not info.done]
        for info in running:
            bus.emit(ev.JOB_STARTED, host.name, run_id=info.run_id, name=info.name, argv=list(info.argv),
                     pid=info.pid, log=info.log_path, summary=f"reattached to {info.name} ({info.run_id})")
        await asyncio.gather(*(drain(info.run_id) for info in running))
    finally:
        await jobs.close()


async def stage_cancel(*, transport: Any, host: Any, bus: Any, stage: str, run_id: str | None) -> None:
    """Cancel the run behind a stage (its process group on the box: TERM, then KILL)."""
    if not run_id:
        raise FeatureUnavailable(f"no run is known for stage {stage!r}: nothing to cancel")
    jobs = _jobs(transport, host, bus)
    try:
        await jobs.cancel(run_id)
    finally:
        await jobs.close()


def _target_args(target: str | None) -> list[str]:
    """A path on the box (HF model dir or config.json) or an architecture name."""
    if not target:
        raise FeatureUnavailable("the model and compat probes need a model path or an architecture name")
    return ["--model", target] if ("/" in target or target.endswith(".json")) else ["--arch", target]


async def probe(*, transport: Any, host: Any, bus: Any, probe: str, target: str | None = None) -> None:
    """env / model / compat, as `console probe` runs them; results arrive as probe.* events."""
    runner = _module("remote.probe_runner", "probe runner")
    common: dict[str, Any] = {"workdir": host.workdir, "python": host.python, "bus": bus, "host": host.name}
    if probe == "env":
        await runner.run_probe(transport, "env", ["--workdir", host.workdir], **common)
        return
    if probe == "model":
        await runner.run_probe(transport, "model", _target_args(target), **common)
        return
    compat = _module("remote.compat", "compatibility advisor")
    from remote import events as ev

    (env,) = await runner.run_probe(transport, "env", ["--workdir", host.workdir], **common)
    for model in await runner.run_probe(transport, "model", _target_args(target), **common):
        findings = compat.advise(env, model)
        result = {"architecture": model.get("architecture"),
                  "versions": {k: (env.get("packages") or {}).get(k) for k in ("vllm", "speculators", "transformers")},
                  "findings": [f.to_dict() for f in findings], "summary": compat.summarize(findings)}
        bus.emit(ev.PROBE_RESULT, host.name, probe="compat", result=result,
                 summary=f"{model.get('architecture')}: {result['summary']}")


PIPELINE_CONFIG_NAME = "pipeline.toml"


async def _pipeline(transport: Any, host: Any, bus: Any) -> tuple[Any, str]:
    """The runner and the pipeline config it uses: `<workdir>/pipeline.toml` on the box, or,
    on the built-in local host without one, the tiny CPU demo (built once, then reused)."""
    module = _module("remote.pipeline_runner", "pipeline runner")
    runner = module.PipelineRunner(transport, host, bus)
    root = await runner.root()
    config = f"{root.rstrip('/')}/{PIPELINE_CONFIG_NAME}"
    found = await transport.run(["test", "-f", config])
    if found.returncode == 0:
        return runner, config
    if host.is_local:
        return runner, await runner.demo_setup()
    raise FeatureUnavailable(
        f"no pipeline config at {config} on {host.name}: put one there (docs/pipeline.md), "
        f"or run `console run --host {host.name} --pipeline FILE`"
    )


async def start_stage(*, transport: Any, host: Any, bus: Any, stage: str) -> None:
    """Run one stage now (even if its manifest matches), tailing it into stage.* events."""
    runner, config = await _pipeline(transport, host, bus)
    try:
        await runner.validate(config)
        outcome = await runner.run_job(stage, stage, [stage, "--config", config, "--force"])
    finally:
        await runner.jobs.close()
    if outcome.state == "failed":
        from remote.errors import StageFailed

        raise StageFailed(f"stage {stage} failed: {outcome.error}")


async def resume(*, transport: Any, host: Any, bus: Any) -> None:
    """Every stage in order, skipping those whose manifest matches (what `console run` does)."""
    runner, config = await _pipeline(transport, host, bus)
    try:
        await runner.run(config)
    finally:
        await runner.jobs.close()
