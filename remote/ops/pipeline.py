"""Pipeline stages and detached jobs: run, resume, cancel, reattach.

The stage events come from the job tail itself (remote/jobs/stage_records.py), so running a stage
here, reattaching to it after a restart, or replaying the session all show the same progress.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing

from remote.jobs.client import Jobs
from remote.link.errors import StageFailed, UsageError
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.pipeline_runner import PipelineRunner, StageOutcome
from remote.spine import events as ev
from remote.spine.bus import EventBus

PIPELINE_CONFIG_NAME = "pipeline.toml"


def jobs(transport: Transport, host: HostConfig, bus: EventBus | None) -> Jobs:
    return Jobs(transport, host.workdir, host=host.name, bus=bus, python=host.python)


async def box_pipeline(transport: Transport, host: HostConfig, bus: EventBus
                       ) -> tuple[PipelineRunner, str]:
    """The runner and the config the TUI's actions use: `<workdir>/pipeline.toml` on the box,
    or, on the built-in local host without one, the tiny CPU demo (built once, then reused)."""
    runner = PipelineRunner(transport, host, bus)
    root = await runner.root()
    config = f"{root.rstrip('/')}/{PIPELINE_CONFIG_NAME}"
    found = await transport.run(["test", "-f", config])
    if found.returncode == 0:
        return runner, config
    if host.is_local:
        return runner, await runner.demo_setup()
    raise UsageError(
        f"no pipeline config at {config} on {host.name}: put one there (docs/pipeline.md), "
        f"or run `console run --host {host.name} --pipeline FILE`")


async def run_pipeline(runner: PipelineRunner, config: str, *, start: str | None = None,
                       force: bool = False) -> list[StageOutcome]:
    """Every stage in order (from `start`), skipping those whose manifest matches."""
    try:
        return await runner.run(config, start=start, force=force)
    finally:
        await runner.jobs.close()


async def start_stage(runner: PipelineRunner, config: str, stage: str) -> StageOutcome:
    """Run one stage now, even if its manifest matches; StageFailed when it fails."""
    try:
        await runner.validate(config)
        outcome = await runner.run_job(stage, stage, [stage, "--config", config, "--force"])
    finally:
        await runner.jobs.close()
    if outcome.state == "failed":
        raise StageFailed(f"stage {stage} failed: {outcome.error}")
    return outcome


async def cancel(transport: Transport, host: HostConfig, bus: EventBus, run_id: str,
                 *, grace: float = 10.0) -> None:
    """Stop a run: TERM its process group on the box, KILL after the grace."""
    j = jobs(transport, host, bus)
    try:
        await j.cancel(run_id, grace=grace)
    finally:
        await j.close()


async def reattach(transport: Transport, host: HostConfig, bus: EventBus) -> None:
    """On connect: announce the box's running jobs and tail their logs into the event stream
    (job.line, and stage events from their records), until they end."""
    j = jobs(transport, host, bus)

    async def drain(run_id: str) -> None:
        async with aclosing(j.tail(run_id, offset=0, follow=True)) as lines:
            async for _ in lines:
                pass
        await j.wait(run_id)  # the tail ends with the run; this says how (job.exit)

    try:
        running = [info for info in await j.list() if not info.done]
        for info in running:
            bus.emit(ev.JOB_STARTED, host.name, run_id=info.run_id, name=info.name,
                     argv=list(info.argv), pid=info.pid, log=info.log_path,
                     summary=f"reattached to {info.name} ({info.run_id})")
        await asyncio.gather(*(drain(info.run_id) for info in running))
    finally:
        await j.close()


