"""Adapters from the controller's action calls to the operations layer (remote/ops/).

The TUI runs the same operations as the headless commands (probe and compat, patch with the
"plan changed since shown" check, stages, reattached tails); this module only adapts the
controller's keyword calls (transport=, host= (HostConfig), bus=, plus the action's own). Each
imports its operation inside the function, a plain import: the console's first paint does not
wait for the transports, httpx or the patcher. No Textual here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from remote.errors import UsageError


async def patch_plan(*, transport: Any, host: Any, bus: Any) -> None:
    from remote.ops import patch as ops

    await ops.plan(ops.patcher(transport, host, bus))


async def patch_apply(*, transport: Any, host: Any, bus: Any, file: str,
                      shown: Sequence[Any] | None = None) -> None:
    """The operator confirmed in the Patch screen: apply, if a fresh plan is still the one the
    screen showed (`shown`: the patch.planned payloads it displayed), else refuse (exit 4)."""
    from remote.ops import patch as ops

    await ops.apply(ops.patcher(transport, host, bus), shown=shown)


async def patch_verify(*, transport: Any, host: Any, bus: Any, file: str, rollback: bool = False) -> None:
    """Check which recipes are in effect, or (`rollback`) put the original file back."""
    from remote.ops import patch as ops

    await (ops.rollback if rollback else ops.verify)(ops.patcher(transport, host, bus))


async def jobs_reattach(*, transport: Any, host: Any, bus: Any,
                        following: set[str] | None = None, seen: set[str] | None = None) -> None:
    """On connect: the finished pipeline runs' logs and the stages' manifests, then the box's
    running jobs (the box runner among them) tailed into the event stream."""
    from remote.ops import pipeline as ops

    await ops.reattach(transport, host, bus, following=following, seen=seen)


async def stage_cancel(*, transport: Any, host: Any, bus: Any, stage: str, run_id: str | None) -> None:
    """Cancel the run behind a stage (its process group on the box: TERM, then KILL)."""
    from remote.ops import pipeline as ops

    if not run_id:
        raise UsageError(f"no run is known for stage {stage!r}: nothing to cancel")
    await ops.cancel(transport, host, bus, run_id)


async def probe(*, transport: Any, host: Any, bus: Any, probe: str, target: str | None = None) -> None:
    """A probe as `console probe` runs it (its row in remote/probe_table.py; model and compat
    read `target`); results arrive as probe.* events."""
    from remote.ops import probes as ops
    from remote.probe_table import ProbeRequest

    await ops.run(transport, host, bus, probe, ProbeRequest.from_target(target))


async def start_stage(*, transport: Any, host: Any, bus: Any, stage: str,
                      following: set[str] | None = None) -> None:
    """Run one stage now (even if its manifest matches) and the stages it leaves out of date:
    one box runner that carries on through evaluate if the console quits."""
    from remote.ops import pipeline as ops

    runner, config, demo_dir = await ops.box_pipeline(transport, host, bus)
    await ops.start_stage(runner, config, stage, demo_dir=demo_dir, following=following)


async def resume(*, transport: Any, host: Any, bus: Any,
                 following: set[str] | None = None) -> None:
    """Every remaining stage in order, skipping those whose manifest matches (what `console
    run` does): one box runner, or the one already running (attached, not started twice)."""
    from remote.ops import pipeline as ops

    runner, config, demo_dir = await ops.box_pipeline(transport, host, bus)
    await ops.run_pipeline(runner, config, demo_dir=demo_dir, following=following)


# -- serve and bench (the Bench screen) -----------------------------------------------------------
# `console serve start|stop` and `console bench run` call remote/ops/serve.py and
# remote/ops/bench.py; so do these. The bench options are typed as on the command line and read
# by `console bench run`'s own parser, so they mean the same and are checked the same.

async def serve_start(*, transport: Any, host: Any, bus: Any, role: str,
                      pipeline: str | None = None) -> None:
    """Start the `role` server (`console serve start [--baseline] --pipeline FILE | --demo`)
    and return once it answers; EngineFailed (with the engine log's tail) when it dies."""
    from pathlib import Path

    from remote.ops import serve as ops
    from remote.serving.serve import extra_vllm_args

    path = Path(pipeline).expanduser() if pipeline else None
    if path is not None and not path.is_file():
        raise UsageError(f"{pipeline}: pipeline config not found on this machine")
    python = await ops.local_python(transport, host) if host.is_local else None
    r = ops.runner(transport, host, bus, python=python)
    try:
        await ops.start(r, role, pipeline=path, vllm_args=extra_vllm_args(None, demo=path is None))
    finally:
        await r.close()


async def serve_stop(*, transport: Any, host: Any, bus: Any, role: str | None = None) -> None:
    """`console serve stop`: cancel the serve jobs (their process groups)."""
    from remote.ops import serve as ops
    from remote.spine import events as ev

    r = ops.runner(transport, host, bus)
    try:
        stopped = await ops.stop(r, role)
    finally:
        await r.close()
    if not stopped:
        bus.emit(ev.CONSOLE_INFO, host.name, message=f"no serve job running on {host.name}")


async def serve_found(*, transport: Any, host: Any, bus: Any) -> dict[str, Any]:
    """`console serve status`: the servers running on the box, each published (serve.ready or
    serve.starting, read from the box) as the console that started it showed it; role ->
    remote.serving.serve.Served."""
    from remote.ops import serve as ops

    r = ops.runner(transport, host, bus)
    try:
        return dict(await ops.found(r))
    finally:
        await r.close()


def bench_settings(options: str, host: str, verb: str = "run") -> Any:
    """The operator's `console bench run` (or `matrix`) options, read by that command's
    parser."""
    import argparse
    import shlex

    from console.commands.bench import register

    class Parser(argparse.ArgumentParser):
        """Says what is wrong instead of printing usage and exiting (the TUI keeps running)."""

        def error(self, message: str) -> NoReturn:
            raise UsageError(f"bench options {options!r}: {message}")

    parser = Parser(prog="console", add_help=False)
    register(parser.add_subparsers(dest="command").add_parser("bench"))
    try:
        argv = shlex.split(options)
    except ValueError as exc:
        raise UsageError(f"bench options {options!r}: {exc}") from None
    if any(a in ("-h", "--help") for a in argv):
        raise UsageError(f"bench options: the same as `console bench {verb}` (see its --help)")
    return parser.parse_args(["bench", verb, "--host", host, *argv])


async def bench_found(*, transport: Any, host: Any, bus: Any,
                      seen: set[str] | None = None) -> None:
    """On connect: the bench results kept on the box (`<workdir>/bench/`: this console's
    runs and `vllm bench serve --save-result` files) published as their sweeps were."""
    from console.bench_tables import point_summary
    from remote.ops import bench as ops

    await ops.found_results(transport, host, bus, seen=seen, point_text=point_summary)


async def bench_run(*, transport: Any, host: Any, bus: Any, options: str = "",
                    baseline_url: str | None = None, seen: set[str] | None = None) -> None:
    """`console bench run OPTIONS` against the host's server; when the baseline server runs
    (and the options name no baseline) it is measured first, as --baseline-url does. Its
    result is kept on the box too (noted in `seen`: a reconnect does not show it twice)."""

    from console.bench_tables import point_summary
    from console.commands.bench import result_path, run_plan
    from remote.bench.served import offline_vs_served
    from remote.ops import bench as ops
    from remote.spine import events as ev

    args = bench_settings(options, host.name)
    settings, label, earlier = run_plan(args)
    if not (args.baseline or args.baseline_url or args.no_speculation):
        args.baseline_url = baseline_url
    done = await ops.run(transport, host, bus, settings, label=label,
                         out_path=result_path(args, label, kind="tui-bench"),
                         point_text=point_summary, speculative=not args.no_speculation,
                         baseline_url=args.baseline_url, earlier=earlier,
                         offline_path=args.offline)
    if done.box_path is not None and seen is not None:
        seen.add(f"bench:{done.box_path}")
    if done.served is not None or done.offline is not None:
        bus.emit(ev.CONSOLE_INFO, host.name, message=offline_vs_served(done.offline, done.served),
                 offline=done.offline, served=done.served)


async def bench_matrix(*, transport: Any, host: Any, bus: Any, options: str) -> None:
    """`console bench matrix OPTIONS` on the host: its plan, each cell (with the ETA) and its
    end are bench.matrix events, which the Bench screen shows as they come."""
    from console.commands.bench_matrix import matrix_path, matrix_plan, resume_or_new
    from remote.ops import matrix as mops
    from remote.ops import serve as sops
    from remote.serving.serve import extra_vllm_args

    args = bench_settings(options, host.name, "matrix")
    plan, prompts = matrix_plan(args)
    path = matrix_path(args, plan)
    m = resume_or_new(path, plan, host.name, force=args.force)
    python = args.python or (await sops.local_python(transport, host) if host.is_local else None)
    runner = sops.runner(transport, host, bus, python=python)
    await mops.run_matrix(runner, m, prompts,
                          pipeline=Path(args.pipeline).expanduser() if args.pipeline else None,
                          vllm_args=extra_vllm_args(args.vllm_args, demo=args.demo),
                          out_path=path, start_timeout=args.start_timeout,
                          request_timeout=args.timeout)


async def live_acceptance(*, transport: Any, host: Any, bus: Any, interval: float) -> None:
    """`console bench watch` for as long as the speculative server runs: one bench.watch
    event per window (acceptance rate, mean acceptance length, per position)."""
    from remote.ops import bench as ops

    await ops.watch(transport, host, bus, interval=interval, count=None, model=None, windows=[])


async def stream_stats(*, transport: Any, host: Any, bus: Any, interval: float,
                       alerts: dict[str, float] | None = None) -> None:
    """Live stats for as long as the console runs (`console stats`'s stream), with its alerts."""
    from remote.ops import stats as ops

    await ops.stream(transport, host, bus, interval=interval, alerts=alerts)
