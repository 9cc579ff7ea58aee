"""The pipeline as one box-side run: start (or attach to) it, follow it, cancel it, and reattach
to it after a restart.

The box carries the pipeline (pipeline/sequence.py, launched as one detached job): these
operations only start it and watch it. The stage events come from the job tail itself
(remote/jobs/stage_records.py), so following a run here, reattaching to it after a restart, or
replaying the session all show the same progress. `following` (a set the caller keeps, the
TUI's controller) holds the runs this console already tails, so a second start that attaches to
a run being shown waits for its end instead of tailing it twice.
"""

from __future__ import annotations

import asyncio
import posixpath
from contextlib import aclosing, suppress

from pipeline import stages as stage_table
from remote.errors import PipelineFailed, RemoteError, StageFailed, UsageError
from remote.jobs.client import Jobs
from remote.jobs.records import RunInfo
from remote.jobs.remembered import RememberedRuns
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.pipeline_runner import RUN_NAME, PipelineRunner, RunOutcome, run_config
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.train_nodes import Reach, TrainNodes

PIPELINE_CONFIG_NAME = "pipeline.toml"
DEMO_DIR = "demo"
RUNS_LOOKED_BACK = 10  # finished box runs read for stages the newer ones did not run


def jobs(transport: Transport, host: HostConfig, bus: EventBus | None) -> Jobs:
    return Jobs(transport, host.workdir, host=host.name, bus=bus, python=host.python)


async def box_pipeline(transport: Transport, host: HostConfig, bus: EventBus
                       ) -> tuple[PipelineRunner, str | None, str | None]:
    """The runner and what the TUI's actions run: `<workdir>/pipeline.toml` on the box (the
    config), or, on the built-in local host without one, the tiny CPU demo (its directory: the
    box runner builds it once, then reuses it)."""
    runner = PipelineRunner(transport, host, bus)
    root = await runner.root()
    config = posixpath.join(root, PIPELINE_CONFIG_NAME)
    found = await transport.run(["test", "-f", config])
    if found.returncode == 0:
        return runner, config, None
    if host.is_local:
        return runner, None, posixpath.join(root, DEMO_DIR)
    raise UsageError(
        f"no pipeline config at {config} on {host.name}: put one there (docs/pipeline.md), "
        f"or run `console run --host {host.name} --pipeline FILE`")


async def run_pipeline(runner: PipelineRunner, config: str | None = None, *,
                       demo_dir: str | None = None, start: str | None = None,
                       force: bool = False, rerun: str | None = None,
                       following: set[str] | None = None,
                       reach: Reach | None = None, until: str | None = None) -> RunOutcome:
    """Start the box runner (or attach to the one running) and follow it to its end;
    PipelineFailed (a StageFailed) when a stage failed. With `following`, a run this console
    already tails is waited for, not tailed again. `reach` (a host name -> its config and
    transport) lets a config with `[train] hosts` train across those boxes
    (remote/train_nodes.py)."""
    nodes: TrainNodes | None = None
    try:
        if config is not None:
            resolved = await runner.validate(config)
            runner.advise_config(resolved)
            if len(resolved.get("train_hosts") or []) > 1:
                if reach is None:
                    raise UsageError("train.hosts: training across boxes is started by `console "
                                     "run --host FIRST --pipeline FILE` (not from here yet)")
                nodes = TrainNodes(runner, reach)
                await nodes.prepare(resolved, config)
                runner.record_hook = nodes.on_record
        info, how = await runner.start(config, demo_dir=demo_dir, start=start, force=force,
                                       rerun=rerun, until=until)
        if following is not None and info.run_id in following:
            final = await runner.jobs.wait(info.run_id)
            if final.returncode != 0:
                raise StageFailed(f"the pipeline run {info.run_id} {final.state} "
                                  f"(returncode {final.returncode}): its stages say which failed")
            return RunOutcome(info.run_id, how, info=final)
        return await _follow(runner, info, how, following)
    except BaseException:
        if nodes is not None:
            nodes.stop_following()  # the other boxes train on; only their tails stop
        raise
    finally:
        if nodes is not None:
            await nodes.close()
        await runner.jobs.close()


async def _follow(runner: PipelineRunner, info: RunInfo, how: str,
                  following: set[str] | None) -> RunOutcome:
    if following is not None:
        following.add(info.run_id)
    try:
        outcome = await runner.follow(info.run_id, how=how)
    finally:
        if following is not None:
            following.discard(info.run_id)
    config = run_config(info.argv)
    if config and outcome.ok:  # the stages as their manifests now say: times and sizes
        # RemoteError: the run's own events said what happened; the manifests are extra.
        with suppress(RemoteError):
            await runner.show_manifests(config)
    if not outcome.ok:
        failed = outcome.failed
        what = (f"stage {failed.name} failed" if failed is not None
                else f"the pipeline run {outcome.info.state if outcome.info else 'ended'}")
        raise PipelineFailed(f"{what} (the error is above; its full text is in the session "
                             "file and `console jobs` log)", outcome)
    return outcome


async def start_stage(runner: PipelineRunner, config: str | None, stage: str, *,
                      demo_dir: str | None = None,
                      following: set[str] | None = None) -> RunOutcome:
    """Run `stage` now even if its manifest matches, and the stages after it that its new
    outputs leave out of date: one box runner, as `console run` starts."""
    if stage not in stage_table.names():
        raise UsageError(f"{stage!r} is not a pipeline stage ({', '.join(stage_table.names())}): "
                         "s starts one of them")
    return await run_pipeline(runner, config, demo_dir=demo_dir, rerun=stage,
                              following=following)


async def cancel(transport: Transport, host: HostConfig, bus: EventBus, run_id: str,
                 *, grace: float = 10.0) -> None:
    """Stop a run: TERM its process group on the box (the box runner and its stage), KILL
    after the grace."""
    j = jobs(transport, host, bus)
    try:
        await j.cancel(run_id, grace=grace)
    finally:
        await j.close()


async def _pipeline_config(runner: PipelineRunner, runs: list[RunInfo]) -> str | None:
    """The config whose manifests to show: the latest box runner's, else the box's
    `<workdir>/pipeline.toml`, else (on local) the demo's, when there is one."""
    for info in reversed(runs):
        if info.name == RUN_NAME and run_config(info.argv):
            return run_config(info.argv)
    remembered = RememberedRuns().recall(runner.host)
    if remembered and remembered.get("config"):
        return str(remembered["config"])
    root = await runner.root()
    for path in (posixpath.join(root, PIPELINE_CONFIG_NAME),
                 posixpath.join(root, DEMO_DIR, PIPELINE_CONFIG_NAME)):
        if (await runner.transport.run(["test", "-f", path])).returncode == 0:
            return path
    return None


async def _runs_that_ran(transport: Transport, host: HostConfig,
                         finished: list[RunInfo]) -> tuple[list[RunInfo], set[str]]:
    """The finished box runs whose logs hold what the stages last did, oldest first: the
    newest, then older ones for each stage the newer did not run (skipped as up to date), up
    to RUNS_LOOKED_BACK; and the stages none of them ran. Their records are looked at here
    by their events, published nowhere (a bus-less tail); the runs chosen are then read once through the job
    tail."""
    wanted = set(stage_table.names())
    if not finished:
        return [], wanted
    quiet = jobs(transport, host, None)
    chosen: list[RunInfo] = []
    try:
        for info in reversed(finished[-RUNS_LOOKED_BACK:]):
            ran: set[str] = set()
            async with aclosing(quiet.tail(info.run_id, offset=0, follow=False)) as lines:
                async for line in lines:
                    if line.event is not None and line.event.kind == ev.STAGE_START:
                        ran.add(str(line.event.payload["stage"]))
            if not chosen or ran & wanted:
                chosen.append(info)
            wanted -= ran
            if not wanted:
                break
    finally:
        await quiet.close()
    return chosen[::-1], wanted


async def _evaluate_result(runner: PipelineRunner, config: str) -> None:
    """evaluate's acceptance.json on the box, for a console that found no log of the run that
    wrote it (older than the runs looked at, or removed): the Bench screen's offline acceptance
    as a stage.end of evaluate, its manifest's facts to follow. Nothing when there is none."""
    from remote.ops.bench import fetch_offline

    try:
        output_dir = str((await runner.validate(config)).get("output_dir") or "")
        path = posixpath.join(output_dir, stage_table.EVALUATE, "acceptance.json")
        if not output_dir or (await runner.transport.run(["test", "-f", path])).returncode != 0:
            return
        result = await fetch_offline(runner.transport, path)
    except RemoteError as exc:
        runner.emit_info(f"evaluate's result on {runner.host.name}: {exc}")
        return
    runner.bus.emit(ev.STAGE_END, runner.host.name, stage=stage_table.EVALUATE, ok=True, result=result,
                    summary=f"evaluate's result on the box: {path}")


async def _read_finished(j: Jobs, bus: EventBus, host: str, info: RunInfo) -> None:
    """A finished run's log from its first byte, through the job tail (job.line events and the
    stage events of its records, as a console that watched it saw them), then its exit."""
    bus.emit(ev.JOB_STARTED, host, run_id=info.run_id, name=info.name, argv=list(info.argv),
            pid=info.pid, log=info.log_path,
            summary=f"read {info.name} ({info.run_id}, {info.state}) from the box")
    async with aclosing(j.tail(info.run_id, offset=0, follow=False)) as lines:
        async for _ in lines:
            pass
    await j.wait(info.run_id)  # job.exit: how it ended


async def reattach(transport: Transport, host: HostConfig, bus: EventBus, *,
                   following: set[str] | None = None, seen: set[str] | None = None) -> None:
    """On connect: every screen rebuilt from the box. The finished box runs' logs read from
    their start (the stage table, the loss curve and evaluate's acceptance, as a console that
    watched them saw them: the same job tail), the pipeline's stages as their manifests say
    (times, sizes), then every running job tailed into the event stream (job.line, and stage
    events from their records) until it ends; a box runner among them is announced as
    reattached. `seen` (the caller's) holds what this console has read already (finished runs,
    `acceptance:<config>`): read once a session, never twice."""
    runner = PipelineRunner(transport, host, bus)
    j = runner.jobs
    following = following if following is not None else set()
    seen = seen if seen is not None else set()

    async def drain(info: RunInfo) -> None:
        if info.name == RUN_NAME:
            runner.announce(info, "reattached")
            with suppress(StageFailed):  # its stage events and not-run stages say it
                await _follow(runner, info, "reattached", following)
            return
        following.add(info.run_id)
        try:
            async with aclosing(j.tail(info.run_id, offset=0, follow=True)) as lines:
                async for _ in lines:
                    pass
            await j.wait(info.run_id)  # the tail ends with the run; this says how (job.exit)
        finally:
            following.discard(info.run_id)

    try:
        runs = await j.list()
        running = [info for info in runs if not info.done and info.run_id not in following]
        config = await _pipeline_config(runner, runs)
        latest = next((i for i in reversed(runs) if i.name == RUN_NAME), None)
        if latest is not None and latest.done:  # what the stages shown come from
            bus.emit(ev.PIPELINE_RUN, host.name, run_id=latest.run_id, how="found",
                     state=latest.state, config=run_config(latest.argv), started=latest.started,
                     summary=f"last pipeline run on {host.name}: {latest.run_id} "
                     f"({latest.state}, returncode {latest.returncode})")
        read_before = any(i.run_id in seen for i in runs)
        finished = [i for i in runs if i.name == RUN_NAME and i.done
                    and i.run_id not in following and i.run_id not in seen]
        chosen, unread = await _runs_that_ran(transport, host, finished)
        for info in chosen:
            await _read_finished(j, bus, host.name, info)
            seen.add(info.run_id)
        if (config is not None and stage_table.EVALUATE in unread and not read_before
                and f"acceptance:{config}" not in seen
                and not any(i.name == RUN_NAME for i in running)):
            await _evaluate_result(runner, config)
            seen.add(f"acceptance:{config}")
        if config is not None:
            try:
                await runner.show_manifests(config)
            except RemoteError as exc:
                bus.emit(ev.CONSOLE_INFO, host.name,
                         message=f"pipeline manifests of {config}: {exc}")
        for info in running:
            bus.emit(ev.JOB_STARTED, host.name, run_id=info.run_id, name=info.name,
                     argv=list(info.argv), pid=info.pid, log=info.log_path,
                     summary=f"reattached to {info.name} ({info.run_id})")
        await asyncio.gather(*(drain(info) for info in running))
    finally:
        await j.close()


def remembered_hosts(hosts: list[HostConfig], bus: EventBus) -> list[str]:
    """The hosts where this laptop started or attached to a pipeline run (remote/jobs/
    remembered.py), each said on the bus: the TUI reconnects to them at start."""
    memory, remembered = RememberedRuns(), []
    for host in hosts:
        try:
            run = memory.recall(host)
        except RemoteError:
            continue
        if run is not None:
            remembered.append(host.name)
            bus.emit(ev.CONSOLE_INFO, host.name, message=(
                f"reattaching to {host.name}: pipeline run {run['run_id']} was started or "
                "followed from here (auto_reattach = false under [console] in console.toml "
                "turns this off)"))
    return remembered
