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
from typing import Any, NoReturn

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


async def jobs_reattach(*, transport: Any, host: Any, bus: Any,
                        following: set[str] | None = None) -> None:
    """On connect: the pipeline's stages from their manifests, then the box's running jobs
    (the box runner among them) tailed into the event stream."""
    await _module("remote.ops.pipeline", "detached jobs").reattach(transport, host, bus,
                                                                   following=following)


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


async def start_stage(*, transport: Any, host: Any, bus: Any, stage: str,
                      following: set[str] | None = None) -> None:
    """Run one stage now (even if its manifest matches) and the stages it leaves out of date:
    one box runner that carries on through evaluate if the console quits."""
    ops = _pipeline_ops()
    runner, config, demo_dir = await ops.box_pipeline(transport, host, bus)
    await ops.start_stage(runner, config, stage, demo_dir=demo_dir, following=following)


async def resume(*, transport: Any, host: Any, bus: Any,
                 following: set[str] | None = None) -> None:
    """Every remaining stage in order, skipping those whose manifest matches (what `console
    run` does): one box runner, or the one already running (attached, not started twice)."""
    ops = _pipeline_ops()
    runner, config, demo_dir = await ops.box_pipeline(transport, host, bus)
    await ops.run_pipeline(runner, config, demo_dir=demo_dir, following=following)


# -- serve and bench (the Bench screen) -----------------------------------------------------------
# `console serve start|stop` and `console bench run` call remote/ops/serve.py and
# remote/ops/bench.py; so do these. The bench options are typed as on the command line and read
# by `console bench run`'s own parser, so they mean the same and are checked the same.

def _serve_ops() -> ModuleType:
    return _module("remote.ops.serve", "vLLM server")


def _bench_ops() -> ModuleType:
    return _module("remote.ops.bench", "benchmarks")


async def serve_start(*, transport: Any, host: Any, bus: Any, role: str,
                      pipeline: str | None = None) -> None:
    """Start the `role` server (`console serve start [--baseline] --pipeline FILE | --demo`)
    and return once it answers; EngineFailed (with the engine log's tail) when it dies."""
    from pathlib import Path

    from remote.link.errors import UsageError
    from remote.serving.serve import extra_vllm_args

    ops = _serve_ops()
    path = Path(pipeline).expanduser() if pipeline else None
    if path is not None and not path.is_file():
        raise UsageError(f"{pipeline}: pipeline config not found on this machine")
    r = ops.runner(transport, host, bus)
    try:
        await ops.start(r, role, pipeline=path, vllm_args=extra_vllm_args(None, demo=path is None))
    finally:
        await r.close()


async def serve_stop(*, transport: Any, host: Any, bus: Any, role: str | None = None) -> None:
    """`console serve stop`: cancel the serve jobs (their process groups)."""
    from remote.spine import events as ev
    ops = _serve_ops()
    r = ops.runner(transport, host, bus)
    try:
        stopped = await ops.stop(r, role)
    finally:
        await r.close()
    if not stopped:
        bus.emit(ev.CONSOLE_INFO, host.name, message=f"no serve job running on {host.name}")


async def serve_running(*, transport: Any, host: Any, bus: Any) -> dict[str, str]:
    """`console serve status`: role -> run id of the servers running on the box."""
    ops = _serve_ops()
    r = ops.runner(transport, host, bus)
    try:
        return dict(await ops.running(r))
    finally:
        await r.close()


def bench_settings(options: str, host: str) -> Any:
    """The operator's `console bench run` options, read by that command's parser."""
    import argparse
    import shlex

    from console.commands.bench import register
    from remote.link.errors import UsageError

    class Parser(argparse.ArgumentParser):
        """Says what is wrong instead of printing usage and exiting (the TUI keeps running)."""

        def error(self, message: str) -> NoReturn:
            raise UsageError(f"bench options {options!r}: {message}")

    parser = Parser(prog="console", add_help=False)
    register(parser.add_subparsers(dest="command"))
    try:
        argv = shlex.split(options)
    except ValueError as exc:
        raise UsageError(f"bench options {options!r}: {exc}") from None
    if any(a in ("-h", "--help") for a in argv):
        raise UsageError("bench options: the same as `console bench run` (see its --help)")
    return parser.parse_args(["bench", "run", "--host", host, *argv])


async def bench_run(*, transport: Any, host: Any, bus: Any, options: str = "",
                    baseline_url: str | None = None) -> None:
    """`console bench run OPTIONS` against the host's server; when the baseline server runs
    (and the options name no baseline) it is measured first, as --baseline-url does."""
    from pathlib import Path

    from console.bench_tables import point_summary
    from console.commands.bench import sweep_settings
    from console.sessions.writer import default_session_dir
    from remote.bench.driver import parse_concurrency
    from remote.bench.prompts import BUILTIN, load_prompts
    from remote.bench.results import load_result
    from remote.bench.served import offline_vs_served
    from remote.spine import events as ev
    from remote.spine.events import utc_now

    ops = _bench_ops()
    args = bench_settings(options, host.name)
    if args.no_speculation and (args.baseline or args.baseline_url):
        from remote.link.errors import UsageError

        raise UsageError("--no-speculation measures a baseline: it takes no other baseline")
    settings = sweep_settings(args, load_prompts(args.prompts or BUILTIN),
                              parse_concurrency(args.concurrency))
    label = args.label or ("baseline" if args.no_speculation else "speculative")
    earlier = load_result(args.baseline) if args.baseline else None
    if not (args.baseline or args.baseline_url or args.no_speculation):
        args.baseline_url = baseline_url
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)
    out = (Path(args.out).expanduser() if args.out
           else default_session_dir() / f"{utc_now():%Y%m%dT%H%M%SZ}-tui-bench-{safe}.json")
    done = await ops.run(transport, host, bus, settings, label=label, out_path=out,
                         point_text=point_summary, speculative=not args.no_speculation,
                         baseline_url=args.baseline_url, earlier=earlier,
                         offline_path=args.offline)
    if done.served is not None or done.offline is not None:
        bus.emit(ev.CONSOLE_INFO, host.name, message=offline_vs_served(done.offline, done.served),
                 offline=done.offline, served=done.served)


async def live_acceptance(*, transport: Any, host: Any, bus: Any, interval: float) -> None:
    """`console bench watch` for as long as the speculative server runs: one bench.watch
    event per window (acceptance rate, mean acceptance length, per position)."""
    ops = _bench_ops()
    await ops.watch(transport, host, bus, interval=interval, count=None, model=None, windows=[])
