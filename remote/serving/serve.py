"""The `serve` step: vLLM's OpenAI server on the box, as a detached job, with the pipeline's head.

The box side is `python -m pipeline serve` (pipeline/serve.py): it reads the pipeline's own
train/speculative_config.json and replaces itself with vLLM's API server, so the job's process
group is the server's and cancelling the job stops the server and its engine processes alike.
Two roles: `speculative` (the trained head) and `baseline` (the same target without
speculation), each a job named `serve-<role>`, so a second server of the same role on one box is
refused (JobLocked) instead of fighting over the port.

This side launches the job and waits until the server answers `/v1/models` through the same
port forward the benchmarks use. A server that dies while starting (bad config, unsupported
model, out of memory) ends the wait at once with its last log lines, cut to a readable
length; one that never answers is cancelled when the start timeout runs out.

Once it answers, what the console knows of it is written beside the job's own record on the
box, so a console opened later shows the server as this one did (`found`;
remote/serving/records.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shlex
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager, suppress
from pathlib import Path
from typing import NoReturn

import httpx

from remote.bench.reach import forwarded, parse_vllm_url
from remote.errors import EngineFailed, PortInUse, UsageError
from remote.jobs.records import RunInfo
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.pipeline_runner import QUIET_ENV, PipelineRunner
from remote.serving.records import (
    Served,
    answering,
    draft_from_argv,
    first_model,
    read_record,
    url_from_argv,
    write_record,
)
from remote.serving.roles import ROLES
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.traceback_fold import TracebackFolder

LOG_TAIL_LINES = 20
LOG_LINE_CHARS = 300
POLL_S = 1.0
# The demo's tiny target on a CPU: vLLM's warm-up compilation (torch.compile on the CPU
# backend) takes minutes on shared cores and gains nothing for a 4-layer model; eager starts in
# well under a minute. A real box keeps vLLM's defaults.
DEMO_VLLM_ARGS = ("--enforce-eager",)


def extra_vllm_args(text: str | None, *, demo: bool) -> list[str]:
    """--vllm-args as given (one shell-quoted string), else the demo's defaults."""
    if text is not None:
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise UsageError(f"--vllm-args {text!r}: {exc}") from None
    return list(DEMO_VLLM_ARGS) if demo else []


# Run on the box with its own python (stdlib only): bind the port as the server will
# (SO_REUSEADDR, as uvicorn sets it, so a closed server's TIME_WAIT connections do not count),
# exit 3 when something listens there, 4 when the address itself cannot be bound.
_PORT_CHECK = (
    "import errno, socket, sys\n"
    "host, port = sys.argv[1], int(sys.argv[2])\n"
    "try:\n"
    "    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)\n"
    "except OSError as exc:\n"
    "    print(exc); sys.exit(4)\n"
    "family, kind, proto, _, addr = infos[0]\n"
    "s = socket.socket(family, kind, proto)\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "try:\n"
    "    s.bind(addr)\n"
    "except OSError as exc:\n"
    "    print(exc); sys.exit(3 if exc.errno == errno.EADDRINUSE else 4)\n"
    "finally:\n"
    "    s.close()\n"
)


# How to choose each role's address, for the error that says its port is taken.
PORT_FIX = {
    "speculative": "set vllm_url in the host's [hosts.NAME] table of console.toml, or pass "
                   "--url to `console serve start`",
    "baseline": "pass --baseline-url URL to `console run --serve`, or --url to "
                "`console serve start --baseline`",
}


async def check_port_free(transport: Transport, python: str, url: str, role: str,
                          where: str) -> None:
    """PortInUse when `url`'s port cannot be bound on the box. Why before the launch: a vLLM
    told to listen on a taken port loads the whole model first and only then dies with
    "address already in use"; on a 1T target that costs many minutes, here a minute."""
    target = parse_vllm_url(url)
    done = await transport.run([python, "-c", _PORT_CHECK, target.host, str(target.port)],
                               timeout=60)
    if done.returncode == 0:
        return
    said = (done.stdout or done.stderr or "").strip().splitlines()
    detail = said[-1] if said else f"exit {done.returncode}"
    what = "the baseline server's port (vllm_url's + 1 unless chosen)" \
        if role == "baseline" else "the speculative server's port (the host's vllm_url)"
    if done.returncode == 3:
        raise PortInUse(f"port {target.port} on {where} is in use ({detail}): it is {what}, "
                        f"for {url}. Stop what listens there, or choose another port: "
                        f"{PORT_FIX.get(role, '--url')}")
    raise PortInUse(f"cannot listen on {target.host}:{target.port} on {where} ({detail}): "
                    f"it is {what}, for {url}; choose another address: "
                    f"{PORT_FIX.get(role, '--url')}")




def check_draft(role: str, draft: str, k: int | None) -> tuple[str, int | None]:
    """(draft, k) as the box side takes them, or UsageError: the baseline serves the target
    alone (draft none, no K), K is at least 1, and `none` drafts nothing to count."""
    draft = draft.strip() if isinstance(draft, str) else ""
    if not draft:
        raise UsageError("--draft: expected pipeline, none, ngram or a head directory on the "
                         "box")
    if k is not None and k < 1:
        raise UsageError(f"--k {k}: num_speculative_tokens must be at least 1")
    if role == "baseline":
        if draft not in ("pipeline", "none") or k is not None:
            raise UsageError("the baseline serves the target alone: not with --draft "
                             f"{draft}" + (f" --k {k}" if k is not None else ""))
        return "none", None
    if draft == "none" and k is not None:
        raise UsageError(f"--k {k} with --draft none: the target alone drafts nothing")
    return draft, k


def job_name(role: str) -> str:
    return f"serve-{role}"


def default_url(host: HostConfig, role: str) -> str:
    """speculative: the host's vllm_url; baseline: the next port on the same address."""
    url = parse_vllm_url(host.vllm_url)
    return str(url) if role == "speculative" else url.with_host_port(url.host, url.port + 1)


def readable_tail(lines: list[str], n: int = LOG_TAIL_LINES) -> list[str]:
    """The last n non-empty lines, each cut to LOG_LINE_CHARS: vLLM's tracebacks run to
    hundreds of lines and a few are thousands of characters wide."""
    kept = [ln.rstrip() for ln in lines if ln.strip()][-n:]
    return [ln if len(ln) <= LOG_LINE_CHARS else ln[: LOG_LINE_CHARS - 3] + "..." for ln in kept]


class ServeRunner:
    def __init__(self, transport: Transport, host: HostConfig, bus: EventBus,
                 *, python: str | None = None) -> None:
        """`python` runs the server (default: the host's): on `local` the demo's pipeline runs
        in the console's .venv while vLLM lives in the box environment (scripts/box_env.py)."""
        self.transport = transport
        self.host = dataclasses.replace(host, python=python) if python else host
        self.bus = bus
        self.pipeline = PipelineRunner(transport, self.host, bus)
        self.jobs = self.pipeline.jobs

    def _emit(self, kind: str, **payload: object) -> None:
        self.bus.emit(kind, self.host.name, **payload)

    async def start(self, config: str, role: str, *, url: str | None = None,
                    vllm_args: list[str] | None = None, timeout: float = 1800.0,
                    draft: str = "pipeline", k: int | None = None) -> Served:
        """Launch the server job and return once it answers; EngineFailed otherwise. `draft`
        (pipeline, none, ngram or a head directory on the box) and `k` go to the box side,
        which builds the --speculative-config (pipeline/serve.py); the baseline role serves
        the target alone."""
        if role not in ROLES:
            raise UsageError(f"serve role {role!r}: expected one of {', '.join(ROLES)}")
        draft, k = check_draft(role, draft, k)
        url = url or default_url(self.host, role)
        target = parse_vllm_url(url)
        await self.check_port(url, role)
        src = await self.pipeline.source_dir()
        argv = [self.host.python, "-m", "pipeline", "serve", "--config", config,
                "--bind", target.host, "--port", str(target.port)]
        if role == "baseline":
            argv.append("--baseline")
        else:  # `--draft=VALUE`, one word: a directory named `-x` is not read as an option
            argv.append(f"--draft={draft}")
            if k is not None:
                argv.append(f"--k={k}")
        if vllm_args:
            argv += ["--", *vllm_args]
        t0 = time.monotonic()
        info = await self.jobs.launch(argv, name=job_name(role),
                                      env={"PYTHONPATH": src, **QUIET_ENV}, cwd=src)
        what = "" if draft == "pipeline" and k is None else \
            f" with draft {draft}" + (f", K={k}" if k is not None else "")
        self._emit(ev.SERVE_STARTING, role=role, url=url, run_id=info.run_id, pid=info.pid,
                   draft=draft, k=k,
                   summary=f"{role} server starting at {url}{what} ({info.run_id}, "
                           f"pid {info.pid})")
        try:
            model = await self._wait_ready(info.run_id, role, url, timeout)
        except BaseException:
            with suppress(Exception):
                await asyncio.shield(self.jobs.cancel(info.run_id, grace=5.0))
            raise
        served = Served(role=role, url=url, run_id=info.run_id,
                        seconds=round(time.monotonic() - t0, 1), model=model, pid=info.pid,
                        draft=draft, k=k)
        await write_record(self.transport, self.bus, self.host.name, info, served)
        self._emit(ev.SERVE_READY, **served.event_fields(), seconds=served.seconds,
                   summary=f"{role} server answers at {url} after {served.seconds:.0f} s")
        return served

    async def check_port(self, url: str, role: str) -> None:
        await check_port_free(self.transport, self.host.python, url, role, self.host.name)

    async def _wait_ready(self, run_id: str, role: str, url: str, timeout: float) -> str:
        """Until the server answers /v1/models: the model it serves."""
        deadline = time.monotonic() + timeout
        async with forwarded(self.transport, url, is_local=self.host.is_local) as (_, local), \
                httpx.AsyncClient(base_url=local, timeout=5.0) as http:
            while True:
                status = await self.jobs.status(run_id)
                if status.done:
                    rc = "" if status.returncode is None else f" {status.returncode}"
                    await self._failed(run_id, role, f"the {role} server exited{rc} "
                                       f"({status.state}) while starting")
                with suppress(httpx.HTTPError):
                    resp = await http.get("/v1/models")
                    if resp.status_code == 200:
                        return first_model(resp)
                if time.monotonic() > deadline:
                    await self._failed(run_id, role, f"the {role} server did not answer at "
                                       f"{url} in {timeout:.0f} s", " (cancelled)")
                await asyncio.sleep(POLL_S)

    async def _failed(self, run_id: str, role: str, error: str, more: str = "") -> NoReturn:
        tail = await self.log_tail(run_id)
        self._emit(ev.SERVE_FAILED, role=role, run_id=run_id, error=error, log_tail=tail,
                   summary=error)
        raise EngineFailed(error + more, tail)

    async def log_tail(self, run_id: str) -> list[str]:
        """The end of the engine's log, each traceback folded to one line that keeps the
        exception's message (remote/spine/traceback_fold.py)."""
        last: deque[str] = deque(maxlen=200)
        folder = TracebackFolder((await self.jobs.status(run_id)).log_path)
        async with aclosing(self.jobs.tail(run_id, follow=False)) as lines:
            async for line in lines:
                last.extend(folder.feed([line.text], [line.offset])[0])
        last.extend(folder.flush()[0])
        return readable_tail(list(last))

    async def stop(self, served: Served | str, role: str = "") -> str:
        """Cancel the server's job (its whole process group); the state it ended in."""
        run_id = served.run_id if isinstance(served, Served) else served
        role = served.role if isinstance(served, Served) else role
        info = await self.jobs.cancel(run_id, grace=10.0)
        self._emit(ev.SERVE_STOPPED, role=role, run_id=run_id, state=info.state,
                   summary=f"{role or 'server'} {run_id} stopped ({info.state})")
        return info.state

    async def running_jobs(self) -> dict[str, RunInfo]:
        """role -> the serve job running on the box."""
        found: dict[str, RunInfo] = {}
        for info in await self.jobs.list():
            for role in ROLES:
                if info.name == job_name(role) and not info.done:
                    found[role] = info
        return found

    async def found(self) -> dict[str, Served]:
        """role -> the server running on the box, as the console that started it knew it:
        its served.json when there is one; else (started by an older console, or one that
        quit while it loaded) its URL from the job's command line, and whether it answers
        now, with its model, asked once."""
        found: dict[str, Served] = {}
        for role, info in (await self.running_jobs()).items():
            record = await read_record(self.transport, info)
            if record is not None:
                found[role] = record
                continue
            url = url_from_argv(info.argv, self.host)
            model = await answering(self.transport, self.host, url) if url else None
            draft, k = draft_from_argv(info.argv)
            found[role] = Served(role=role, url=url, run_id=info.run_id, seconds=None,
                                 model=model or "", pid=info.pid, ready=model is not None,
                                 draft=draft, k=k)
        return found

    async def __aenter__(self) -> ServeRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.jobs.close()


@asynccontextmanager
async def serving(runner: ServeRunner, config: str, role: str, *, url: str | None = None,
                  vllm_args: list[str] | None = None, timeout: float = 1800.0,
                  draft: str = "pipeline", k: int | None = None) -> AsyncIterator[Served]:
    """A server for the duration of the block: stopped on exit, on error and on cancel."""
    served = await runner.start(config, role, url=url, vllm_args=vllm_args, timeout=timeout,
                                draft=draft, k=k)
    try:
        yield served
    finally:
        await asyncio.shield(runner.stop(served))


def read_offline(path: Path) -> dict[str, object]:
    """evaluate's acceptance.json, as written by pipeline/stages/evaluate.py."""

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        trained = data["heads"]["trained"]
        return {"mean_length": float(trained["mean_length"]), "rate": float(trained["rate"]),
                "per_position": [float(x) for x in trained["per_position"]],
                "prompts": data.get("prompts"), "max_new_tokens": data.get("max_new_tokens")}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: not the pipeline's evaluate output ({exc})") from None
