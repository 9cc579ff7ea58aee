"""`console stats --host H`: live GPU and host stats, one compact line per sample.

`--once` takes one sample and prints it as a table. Samples are stats.sample events, so they
are recorded in the session and `--json` prints them as events.
"""

from __future__ import annotations

import argparse
from typing import Any

from console.argtypes import nonneg_float, positive_float, positive_int, tcp_port
from console.context import Context, add_common_options, add_host_options
from remote.errors import EXIT_FAILED, EXIT_OK, UsageError
from remote.stats.limits import MIN_INTERVAL

# The stream (asyncio, the SSH transport, msgspec events) is imported where it runs:
# `console stats --help` loads none of it.


HELP = "live GPU and host stats from a host"


def register(p: argparse.ArgumentParser) -> None:
    p.description = ("Stream GPU and host stats from a host (one sampler process "
                     "on the box, over the host's one connection). Several hosts (a,b,c or a "
                     "group): one live table, a row per host plus totals.")
    add_host_options(p, fleet=True)
    p.add_argument("--once", action="store_true", help="take one sample and print a table")
    p.add_argument("--interval", type=nonneg_float, default=1.0,
                   help=f"seconds between samples (>= {MIN_INTERVAL}; default 1)")
    p.add_argument("--duration", type=positive_float, default=None,
                   help="stop after this many seconds (default: until interrupted)")
    p.add_argument("--count", type=positive_int, default=None,
                   help="stop after this many samples (default: until interrupted)")
    p.add_argument("--source", choices=("auto", "nvml", "nvidia-smi", "none"), default="auto",
                   help="GPU source on the box (default: NVML, else nvidia-smi, else none)")
    p.add_argument("--prometheus", type=tcp_port, default=None, metavar="PORT",
                   help="also serve the live samples of every host as Prometheus text at "
                   "http://ADDR:PORT/metrics (dcgm-exporter's metric names; 0: a free port)")
    p.add_argument("--prometheus-addr", default="127.0.0.1", metavar="ADDR",
                   help="the address the Prometheus endpoint listens on (default 127.0.0.1: "
                   "this laptop only)")
    add_common_options(p, func=run)


async def run(args: argparse.Namespace) -> int:
    if not args.interval >= MIN_INTERVAL:
        raise UsageError(f"--interval must be at least {MIN_INTERVAL} s (got {args.interval})")
    if args.prometheus is not None and args.once:
        raise UsageError("--prometheus serves a live stream: it does not go with --once")
    from console.commands.stats_fleet import prometheus, run_fleet
    from console.fleet import names_several

    if names_several(args):
        return await run_fleet(args)
    async with Context.from_args(args, hosts=[args.host], show_stats=not args.once) as ctx:
        with prometheus(ctx, args):
            return await _one_host(ctx, args)


async def _one_host(ctx: Context, args: argparse.Namespace) -> int:
    from remote.ops import stats as ops

    host, transport = await ctx.reach(args.host)
    if args.once:
        sample = await ops.sample_once(transport, host, ctx.bus, interval=args.interval,
                                       source=args.source)
        if sample is None:
            ctx.error(f"no sample from {host.name}", host.name)
            return EXIT_FAILED
        ctx.show(format_table(host.name, sample))
        return EXIT_OK
    got = await ops.stream(transport, host, ctx.bus, interval=args.interval,
                           source=args.source, duration=args.duration, count=args.count,
                           alerts=ctx.config.alerts)
    if args.duration is not None and not got:
        ctx.error(f"no sample from {host.name} in {args.duration:g}s", host.name)
        return EXIT_FAILED
    return EXIT_OK


def format_table(host: str, payload: dict[str, Any]) -> str:
    from console.commands.stats_fleet import num
    from console.fleet import aligned
    from pipeline.units import fmt_bytes
    from remote.stats.samples import health_text

    h = payload.get("host", {})
    lines = [
        f"{host}: cpu {num(h.get('cpu'), digits=1, unit='%')}  "
        f"mem {fmt_bytes(h.get('mem_used'), 'GiB')}/{fmt_bytes(h.get('mem_total'), 'GiB')} GiB  "
        f"load1 {num(h.get('load1'), digits=2)}  gpu source: {payload.get('source', 'none')}"
    ]
    if payload.get("reason"):
        lines.append(f"  ({payload['reason']})")
    gpus = payload.get("gpus") or []
    if gpus:
        rows = [("GPU", "NAME", "UTIL", "MEM GiB", "POWER W", "TEMP", "SM MHz", "PCIe tx/rx MiB/s",
                 "PROCS", "HEALTH")]
        for g in gpus:
            rows.append((
                str(g.get("index")), str(g.get("name", "")), num(g.get("util"), unit="%"),
                f"{fmt_bytes(g.get('mem_used'), 'GiB')}/{fmt_bytes(g.get('mem_total'), 'GiB')}",
                f"{num(g.get('power'))}/{num(g.get('power_limit'))}",
                num(g.get("temp"), unit="C"), num(g.get("sm_clock")),
                f"{fmt_bytes(g.get('pcie_tx'), 'MiB')}/{fmt_bytes(g.get('pcie_rx'), 'MiB')}",
                ",".join(str(p.get("pid")) for p in g.get("procs") or []) or "-",
                health_text(g) or ("ok" if "clock_reasons" in g else "-"),
            ))
        lines.append(aligned(rows))
    return "\n".join(lines)
