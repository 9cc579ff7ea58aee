"""`console probe env|model|compat|source --host H`: ask the box what it has before launching.

compat runs the env and model probes and evaluates the advisor's rules on their results; it
exits 4 when a finding of severity `error` says a stage will fail as things stand.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from console.argtypes import positive_float
from console.context import Context, add_common_options, add_host_options
from remote.link.errors import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, UsageError

# The probe runner and the compat advisor (the SSH transport, packaging, msgspec events) are
# imported where they run: `console probe --help` loads none of it.
if TYPE_CHECKING:
    from remote.link.transport import Transport

PROBES = ("env", "model", "compat", "source")


HELP = "run a diagnostic probe on a host (env, model, compat, source)"


def register(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Upload a stdlib-only probe to the host and run it with the host's python. "
        "env: versions, GPUs, topology, host. model: where the model's decoder layers are in the "
        "installed vLLM and whether it implements SupportsEagle3 (static reading of vLLM's source). "
        "compat: known incompatibilities for this box and model, with the fix (exit 4 on errors). "
        "source: the model files, classes and attribute mentions for a family, for what the "
        "resolver cannot settle."
    )
    p.add_argument("probe", choices=PROBES)
    add_host_options(p, fleet=True)
    p.add_argument("--model", metavar="PATH", help="HF model directory or config.json on the host")
    p.add_argument("--arch", metavar="NAME", help="architecture name (instead of, or overriding, --model)")
    p.add_argument("--family", metavar="NAME", help="model family for `source` (e.g. kimi)")
    p.add_argument("--all", action="store_true", help="model: every architecture in vLLM's registry")
    p.add_argument("--vllm-root", metavar="DIR", help="the vllm package directory on the host (default: installed)")
    p.add_argument("--timeout", type=positive_float, default=600.0, help="seconds to wait for a probe (default 600)")
    add_common_options(p)
    p.set_defaults(func=run)


def _model_args(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    if args.model:
        out += ["--model", args.model]
    if args.arch:
        out += ["--arch", args.arch]
    if args.vllm_root:
        out += ["--vllm-root", args.vllm_root]
    return out


def _validate(args: argparse.Namespace) -> None:
    if args.probe in ("model", "compat") and not (args.model or args.arch or (args.all and args.probe == "model")):
        raise UsageError(f"probe {args.probe} needs --model PATH or --arch NAME")
    if args.probe == "source" and not args.family:
        raise UsageError("probe source needs --family NAME (e.g. kimi)")
    if args.all and args.probe != "model":
        raise UsageError("--all applies to the model probe only")


async def run(args: argparse.Namespace) -> int:
    from remote.probe_runner import run_probe

    _validate(args)
    from console.fleet import names_several

    if names_several(args):
        from console.commands.probe_fleet import run_fleet

        return await run_fleet(args)
    async with Context.from_args(args, hosts=[args.host]) as ctx:
        host = ctx.host(args.host)
        transport = await ctx.transport(args.host)
        common: dict[str, Any] = {"workdir": host.workdir, "python": host.python, "bus": ctx.bus,
                                  "host": host.name, "timeout": args.timeout}
        if args.probe == "env":
            await run_probe(transport, "env", ["--workdir", host.workdir], **common)
            return EXIT_OK
        if args.probe == "source":
            extra = ["--vllm-root", args.vllm_root] if args.vllm_root else []
            await run_probe(transport, "source", ["--family", args.family, *extra], **common)
            return EXIT_OK
        if args.probe == "model":
            results = await run_probe(transport, "model", _model_args(args) + (["--all"] if args.all else []),
                                      **common)
            return EXIT_OK if args.all else model_exit_code(ctx, results, host.name)
        return await _compat(ctx, transport, args, common)


async def run_one(ctx: Context, args: argparse.Namespace, name: str) -> tuple[int, list[Any]]:
    """One host's probe for the fleet form: its exit code and its results."""
    from remote.ops import probes as ops

    host, transport = await ctx.reach(name)
    if args.probe == "env":
        return EXIT_OK, await ops.probe(transport, host, ctx.bus, "env", timeout=args.timeout)
    if args.probe == "source":
        extra = ["--vllm-root", args.vllm_root] if args.vllm_root else []
        return EXIT_OK, await ops.probe(transport, host, ctx.bus, "source",
                                        ["--family", args.family, *extra], timeout=args.timeout)
    if args.probe == "model":
        results = await ops.probe(transport, host, ctx.bus, "model",
                                  _model_args(args) + (["--all"] if args.all else []),
                                  timeout=args.timeout)
        return (EXIT_OK if args.all else model_exit_code(ctx, results, name)), results
    common = {"workdir": host.workdir, "python": host.python, "bus": ctx.bus, "host": name,
              "timeout": args.timeout}
    code = await _compat(ctx, transport, args, common, host_name=name)
    return code, []


def model_exit_code(ctx: Context, results: list[dict[str, Any]], host: str) -> int:
    """0 when every architecture resolved; 1, with the reason, when one did not (unresolved,
    needs_config, config_only), so a script can tell an answer from a shrug. `--all` is a
    survey and exits 0."""
    code = EXIT_OK
    for r in results:
        if r.get("status") != "resolved":
            code = EXIT_FAILED
            ctx.error(f"{r.get('architecture')}: {r.get('status')}: {r.get('reason')}", host)
    return code


async def _compat(ctx: Context, transport: Transport, args: argparse.Namespace,
                  common: dict[str, Any], host_name: str | None = None) -> int:
    from remote.ops import probes as ops

    host = ctx.host(host_name or args.host)
    refused = False
    for outcome in await ops.compat_check(transport, host, ctx.bus, _model_args(args),
                                          timeout=args.timeout):
        for f in outcome.findings:
            line = f"[{f.severity}] {f.rule}: {f.detail} -> fix ({f.fix['kind']}): {f.fix['text']}"
            if f.severity == "error":
                ctx.error(line, host.name, rule=f.rule)
            elif f.severity == "warning":
                ctx.warning(line, host.name, rule=f.rule)
            else:
                ctx.info(line, host.name, rule=f.rule)
        refused = refused or outcome.refused
    return EXIT_REFUSED if refused else EXIT_OK
