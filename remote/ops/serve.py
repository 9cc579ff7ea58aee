"""vLLM's OpenAI server on a host, as `console serve` and `console run --serve` run it.

Each server is a detached job on the box (remote/serving/serve.py) that outlives the console. The
closing step of a pipeline (`run --serve`) serves the baseline and the trained head in turn and
benches them alike (remote/serving/serve_bench.py); its points and summary are published here, as
`console bench` publishes its own (remote/ops/bench.py).
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from remote.bench.results import MIN_REQUESTS, BenchRun, Point, save_result
from remote.errors import UsageError
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.ops import heads
from remote.ops.bench import keep_on_box
from remote.serving.serve import Served, ServeRunner, check_draft, extra_vllm_args
from remote.serving.serve_bench import ServedBench, serve_and_bench
from remote.spine import events as ev
from remote.spine.bus import EventBus

PointText = Callable[[str, Point], str]


runner = ServeRunner  # what stop and status read the servers with: no python of their own


def options(pipeline: str | None, vllm_args: str | None, *, demo: bool) -> tuple[Path | None, list[str]]:
    """A serve's pipeline (a TOML on this machine; None: the demo's) and extra vLLM arguments
    (one shell-quoted string; None: the demo's defaults with `demo`), as `console serve start`,
    `run --serve`, `bench matrix` and the TUI take them: one check, one message each."""
    path = Path(pipeline).expanduser() if pipeline else None
    if path is not None and not path.is_file():
        raise UsageError(f"{pipeline}: pipeline config not found")
    return path, extra_vllm_args(vllm_args, demo=demo)


async def server(transport: Transport, host: HostConfig, bus: EventBus, *,
                 python: str | None = None) -> ServeRunner:
    """The runner every front end starts servers with: `python` when given (--python,
    --serve-python), else on `local` the python with vLLM (local_python), else the host's."""
    if python is None and host.is_local:
        python = await local_python(transport, host)
    return ServeRunner(transport, host, bus, python=python)


# The box environment `make demo` serves with (scripts/box_env.py: vLLM 0.32 CPU + speculators
# 0.9), and the one command that builds it.
BOX_ENV = "vllm032"
_HAS_VLLM = "import importlib.util,sys;sys.exit(0 if importlib.util.find_spec('vllm') else 1)"


async def local_python(transport: Transport, host: HostConfig) -> str:
    """The python that serves on `local` (this machine): the host's own when it has vLLM (a
    `python` set under [hosts.local]), else the box environment `make demo` built (found, never
    built here: a build takes minutes), else UsageError naming the one command that builds it.
    The console's own python has no vLLM: the demo's pipeline and vLLM 0.32 cannot share it."""
    from remote.pipeline_runner import local_source_root

    has = await transport.run([host.python, "-c", _HAS_VLLM], timeout=60)
    if has.returncode == 0:
        return host.python
    script = local_source_root() / "scripts" / "box_env.py"
    if script.is_file():
        found = await transport.run([host.python, str(script), BOX_ENV, "--find"], timeout=60)
        path = found.stdout.strip()
        if found.returncode == 0 and path:
            return path
    build = (f"`python3 {script} {BOX_ENV}`" if script.is_file()
             else f"`python3 scripts/box_env.py {BOX_ENV}` in the console's checkout")
    raise UsageError(
        f"no vLLM to serve with on {host.name}: {host.python} has none and the box environment "
        f"`make demo` builds is not there; {build} builds it (once, minutes), or set `python` "
        f"under [hosts.{host.name}] in console.toml to a python with vLLM")


async def demo_config(r: ServeRunner) -> str:
    """The demo's pipeline.toml on the box; it must have been built by `console run --demo`."""
    path = posixpath.join(await r.pipeline.root(), "demo", "pipeline.toml")
    done = await r.transport.run(["test", "-f", path], timeout=60)
    if done.returncode != 0:
        raise UsageError(f"no demo on {r.host.name} ({path}): run `console run --host "
                         f"{r.host.name} --demo` first")
    return path


async def pipeline_target(transport: Transport, host: HostConfig, bus: EventBus, *,
                          pipeline: Path | None) -> heads.PipelineTarget:
    """The target and head of `pipeline` (the demo's without one), resolved on the box."""
    return heads.target_from(*await resolved_config(runner(transport, host, bus), pipeline))


async def resolved_config(r: ServeRunner, pipeline: Path | None) -> tuple[str, dict[str, Any]]:
    """`pipeline`'s config on the box (the demo's without one) and the box's resolution of it
    (a bad one: UsageError), as a serve, its draft check and the matrix's preflight read it."""
    config = await r.pipeline.remote_config(pipeline) if pipeline else await demo_config(r)
    return config, await r.pipeline.validate(config)


async def probe_python(transport: Transport, host: HostConfig) -> HostConfig:
    """The host as the head probe runs on it: on `local`, with the python that serves there
    (local_python: the box environment), since the console's own has no vLLM to read."""
    if not host.is_local:
        return host
    return replace(host, python=await local_python(transport, host))


async def start(r: ServeRunner, role: str, *, pipeline: Path | None = None, url: str | None = None,
                vllm_args: Sequence[str] = (), timeout: float = 1800.0,
                draft: str = "pipeline", k: int | None = None) -> Served:
    """Start the `role` server with `pipeline`'s target (the demo's without one) and `draft`:
    the pipeline's head (default), none (the target alone), ngram (vLLM's prompt lookup) or a
    head directory on the box; `k` overrides num_speculative_tokens (None: the draft's own).
    Waits until it answers; EngineFailed (with its last log lines) when it dies while
    starting. Cancelled while starting: the server is cancelled too."""
    draft, k = check_draft(role, draft, k)
    config, resolved = await resolved_config(r, pipeline)
    if draft != "none":  # the draft against its target and this vLLM: DraftRefused, no engine
        target = heads.target_from(config, resolved)
        await heads.check(r.transport, r.host, r.bus, draft=draft, target=target.model,
                          pipeline_head=target.head)
    what = "" if draft == "pipeline" and k is None else \
        f", draft {draft}" + (f" K={k}" if k is not None else "")
    r.bus.emit(ev.CONSOLE_INFO, r.host.name,
               message=f"starting the {role} server on {r.host.name} (vLLM with "
               f"{r.host.python}{what}); the engine takes a while to load")
    try:
        return await r.start(config, role, url=url, vllm_args=list(vllm_args), timeout=timeout,
                             draft=draft, k=k)
    except asyncio.CancelledError:
        r.bus.emit(ev.CONSOLE_WARNING, r.host.name,
                   message=f"interrupted: the {role} server was cancelled")
        raise


async def found(r: ServeRunner, role: str | None = None) -> dict[str, Served]:
    """The servers running on the box (only `role`'s, when given), read from the box (their
    served.json, else their job), each published as the console that started it saw it: a
    serve.ready (found=True), or a serve.starting for one that does not answer yet. What
    `console serve status` prints and the TUI shows on connect."""
    servers = {k: v for k, v in (await r.found()).items() if role is None or k == role}
    for srv in servers.values():
        if srv.ready:
            r.bus.emit(ev.SERVE_READY, r.host.name, **srv.event_fields(), seconds=srv.seconds,
                       found=True, summary=srv.line())
        else:
            r.bus.emit(ev.SERVE_STARTING, r.host.name, role=srv.role, url=srv.url,
                       run_id=srv.run_id, pid=srv.pid, found=True, summary=srv.line(),
                       draft=srv.draft, k=srv.k)
    return servers


async def stop(r: ServeRunner, role: str | None = None) -> dict[str, tuple[str, str]]:
    """Cancel the serve jobs (their process groups); role -> (run id, the state it ended in)."""
    return {k: (info.run_id, await r.stop(info.run_id, k))
            for k, info in (await r.running_jobs()).items() if role is None or k == role}


async def serve_and_bench_step(r: ServeRunner, config: str, output_dir: str, *,
                               concurrencies: list[int], max_tokens: int, rounds: int | None,
                               vllm_args: Sequence[str], out_path: Path,
                               min_requests: int = MIN_REQUESTS,
                               point_text: PointText,
                               urls: dict[str, str] | None = None) -> tuple[ServedBench, Path]:
    """The pipeline's closing step: the baseline and then the speculative server, benched
    alike; the result saved to `out_path` and summarised as one bench.summary event."""
    host = r.host.name

    def on_ready(role: str, seconds: float) -> None:
        r.bus.emit(ev.CONSOLE_INFO, host, message=f"{role} engine started in {seconds:.0f} s",
                   role=role, start_seconds=seconds)

    def on_point(role: str, run: BenchRun, p: Point) -> None:
        r.bus.emit(ev.BENCH_POINT, host, label=role, **p.to_dict(),
                   summary=point_text(role, p))

    try:
        result = await serve_and_bench(r, config, output_dir, concurrencies=concurrencies,
                                       max_tokens=max_tokens, rounds=rounds,
                                       min_requests=min_requests,
                                       vllm_args=list(vllm_args), on_point=on_point,
                                       on_ready=on_ready, urls=urls)
    finally:
        await r.close()
    comparison = result.comparison
    summary = {"label": "served", **comparison.to_dict(), "offline": result.offline,
               "served": result.served, "start_seconds": result.start_seconds,
               "summary": comparison.summary()}
    path = save_result(out_path, result.speculative, baseline=result.baseline,
                       comparison=comparison.to_dict(), summary=summary)
    box_path = await keep_on_box(r.transport, r.host, r.bus, path)
    r.bus.emit(ev.BENCH_SUMMARY, host, result_file=str(path), box_file=box_path, **summary)
    return result, path
