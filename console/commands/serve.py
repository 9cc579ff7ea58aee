"""`console serve start | stop | status`: vLLM's OpenAI server on a host with the pipeline's head.

    console serve start --host H --pipeline P.toml            target + train's head, at vllm_url
    console serve start --host H --pipeline P.toml --baseline  target alone, at vllm_url's port+1
    console serve start --host local --demo --python BOXPY     the demo's target and head
    console serve start --host H --demo --draft ngram --k 3     vLLM's n-gram (prompt lookup)
    console serve start --host H --demo --draft /heads/h1       a head directory on the box
    console serve start --host H --demo --draft none            the target alone, at vllm_url
    console serve start ... --vllm-args='--enforce-eager --max-model-len 4096'
    console serve status --host H                              the servers up: URL, model, pid
    console serve stop --host H [--role baseline]              cancel them (process group)

Each server is a detached job on the box (`serve-speculative`, `serve-baseline`; remote/serving/serve.py)
that outlives the console; `start` returns once it answers /v1/models and prints the URL, which
`console bench run` then reaches through the SSH forward. Ctrl-C while it starts cancels it. A
server that dies while starting exits 1 with its last log lines.
"""

from __future__ import annotations

import argparse

from console.argtypes import add_engine_options, add_pipeline_source, positive_int
from console.context import Context, add_common_options, add_host_options, add_verbs
from remote.errors import EXIT_FAILED, EXIT_OK, UsageError
from remote.serving.roles import DRAFTS, ROLES

# The server runner (httpx, asyncio, the SSH transport) is imported where it runs:
# `console serve --help` loads none of it.


HELP = "vLLM's server on a host with the pipeline's trained head"


def register(p: argparse.ArgumentParser) -> None:
    ssub = add_verbs(p, dest="serve_command",
                     description="Start or stop vLLM's OpenAI-compatible server on a host, "
                                 "with the target and the EAGLE-3 head of a pipeline run (or without "
                                 "speculation, for the baseline), as detached jobs.")

    s = ssub.add_parser("start", help="start a server and wait until it answers")
    add_host_options(s)
    add_pipeline_source(s)
    s.add_argument("--baseline", action="store_true",
                   help="serve the target without speculation (default port: vllm_url's + 1)")
    s.add_argument("--draft", default="pipeline", metavar="{" + ",".join(DRAFTS) + ",DIR}",
                   help="what the server speculates with: the pipeline's head (default), none "
                   "(the target alone), ngram (vLLM's prompt lookup, prompt_lookup_min 1 / max "
                   "3), or an EAGLE-3 head directory on the box (speculators or HF format), "
                   "checked against the target before the engine starts")
    s.add_argument("--k", type=positive_int, metavar="N",
                   help="num_speculative_tokens (default: the head's or train's value; "
                   "3 for ngram)")
    s.add_argument("--url", help="where it listens, as seen from the box (default: the host's "
                   "vllm_url; for --baseline the next port)")
    add_engine_options(s, start="the first answer")
    add_common_options(s, func=start_command)

    for name, helptext in (("stop", "cancel the serve jobs on a host"),
                           ("status", "the servers running on a host, read from the box: "
                                      "URL, model, pid, start time")):
        c = ssub.add_parser(name, help=helptext)
        add_host_options(c)
        c.add_argument("--role", choices=ROLES, help="only this server (default: both)")
        add_common_options(c, func=stop_command if name == "stop" else status_command)


async def start_command(args: argparse.Namespace) -> int:
    from remote.errors import EXIT_REFUSED, DraftRefused, EngineFailed
    from remote.ops import serve as ops

    if args.demo == bool(args.pipeline):
        raise UsageError("give --pipeline FILE or --demo")
    pipeline, vllm_args = ops.options(args.pipeline, args.vllm_args, demo=args.demo)
    role = "baseline" if args.baseline else "speculative"
    async with Context.from_args(args, hosts=[args.host]) as ctx:
        host = ctx.config.host(args.host)
        runner = await ops.server(await ctx.transport(host.name), host, ctx.bus, python=args.python)
        try:
            served = await ops.start(runner, role, pipeline=pipeline, url=args.url,
                                     vllm_args=vllm_args, timeout=args.start_timeout,
                                     draft=args.draft, k=args.k)
        except EngineFailed as exc:
            ctx.error(str(exc), host.name)
            return EXIT_FAILED
        except DraftRefused as exc:  # one line per mismatch; no engine was started
            for line in exc.lines:
                ctx.error(line, host.name)
            return EXIT_REFUSED
        ctx.info(f"{served.line()}; stop it with `console serve stop --host {host.name} "
                 f"--role {role}`", host.name, url=served.url, run_id=served.run_id)
        return EXIT_OK


async def stop_command(args: argparse.Namespace) -> int:
    return await _servers(args, stop=True)


async def status_command(args: argparse.Namespace) -> int:
    return await _servers(args, stop=False)


async def _servers(args: argparse.Namespace, *, stop: bool) -> int:
    """The host's servers (of --role, or all): stopped, a line each with the state it ended
    in; or each running one as the console that started it showed it (read from the box: its
    URL, model, pid and start time; serve.ready / serve.starting events)."""
    from remote.ops import serve as ops

    async with Context.from_args(args, hosts=[args.host]) as ctx:
        host = ctx.config.host(args.host)
        async with ops.runner(await ctx.transport(host.name), host, ctx.bus) as r:
            stopped = await ops.stop(r, args.role) if stop else {}
            found = stopped or (await ops.found(r, args.role) if not stop else {})
        if not found:
            ctx.info(f"no serve job running on {args.host}", args.host)
        for role, (run_id, state) in stopped.items():
            ctx.info(f"{role} server {run_id}: {state}", args.host)
        return EXIT_OK
