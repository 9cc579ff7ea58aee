"""`console stats --host a,b,c` (or a group): one live table, a row per host plus totals.

One sampler per box, each on its box's one connection, all publishing stats.sample events with
their host (the session and `--json` carry every box). The table is redrawn from the latest
sample of each host: in place on a terminal, as a new block (at most once a second) when the
output is a file or a pipe, so a 10 Hz stream does not flood a log. What one host's `console
stats` shares with it (the Prometheus endpoint, a number's cell) is here, so that the two modules
do not import each other.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

from console.context import Context
from console.fleet import aligned, open_fleet, run_each, summary
from pipeline.units import fmt_bytes
from remote.errors import EXIT_FAILED, EXIT_OK


def num(v: Any, scale: float = 1.0, digits: int = 0, unit: str = "") -> str:
    if v is None:
        return "-"
    return f"{v / scale:.{digits}f}{unit}"


@contextlib.contextmanager
def prometheus(ctx: Context, args: argparse.Namespace) -> Iterator[None]:
    """The Prometheus endpoint over the command's bus while the streams run (--prometheus)."""
    if args.prometheus is None:
        yield
        return
    from remote.ops import stats as ops

    endpoint = ops.serve_prometheus(ctx.bus, args.prometheus, args.prometheus_addr)
    ctx.info(f"Prometheus metrics at {endpoint.url}", url=endpoint.url)
    try:
        yield
    finally:
        endpoint.close()


HEADER = ("HOST", "CPU", "MEM GiB", "LOAD1", "GPUS", "GPU UTIL", "GPU MEM GiB", "POWER W",
          "SAMPLES")


def _sum(values: list[Any]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) if got else None


def _mean(values: list[Any]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _cells(name: str, hs: list[dict[str, Any]], gpus: list[dict[str, Any]], count: int
           ) -> list[str]:
    """A row of the table: one host's latest sample (hs of one), or the totals (hs of all):
    CPU averaged, memory and load summed, over the hosts; the GPUs' figures over all of them."""
    return [name, num(_mean([h.get("cpu") for h in hs]), digits=1, unit="%"),
            f"{fmt_bytes(_sum([h.get('mem_used') for h in hs]), 'GiB')}/"
            f"{fmt_bytes(_sum([h.get('mem_total') for h in hs]), 'GiB')}",
            num(_sum([h.get("load1") for h in hs]), digits=2), str(len(gpus)),
            num(_mean([g.get("util") for g in gpus]), unit="%"),
            f"{fmt_bytes(_sum([g.get('mem_used') for g in gpus]), 'GiB')}/"
            f"{fmt_bytes(_sum([g.get('mem_total') for g in gpus]), 'GiB')}",
            num(_sum([g.get("power") for g in gpus])), str(count)]


def row(name: str, p: dict[str, Any] | None, count: int) -> list[str]:
    if p is None:
        return [name, "-", "-", "-", "-", "-", "-", "-", "0"]
    return _cells(name, [p.get("host") or {}], p.get("gpus") or [], count)


def render(names: list[str], latest: dict[str, dict[str, Any]], counts: dict[str, int]) -> str:
    totals = _cells(f"TOTAL ({len(latest)})", [p.get("host") or {} for p in latest.values()],
                    [g for p in latest.values() for g in p.get("gpus") or []],
                    sum(counts.values()))
    return aligned([HEADER, *(row(n, latest.get(n), counts.get(n, 0)) for n in names), totals])


async def run_fleet(args: argparse.Namespace) -> int:
    from remote.ops import stats as ops
    from remote.spine import events as ev

    ctx, resolved = open_fleet(args)
    async with ctx:
        latest: dict[str, dict[str, Any]] = {}
        counts: dict[str, int] = {}

        def keep(e: Any) -> None:
            if e.kind == ev.STATS_SAMPLE and e.host:
                latest[e.host] = e.payload
                counts[e.host] = counts.get(e.host, 0) + 1

        remove = ctx.bus.add_callback(keep)
        tty = ctx.out.isatty()
        drawn = [0]  # lines of the table on the terminal now

        def draw() -> None:
            text = render(resolved.names, latest, counts)
            if tty:  # a wrapped line would throw the redraw's count of lines off (80 columns)
                import shutil

                width = shutil.get_terminal_size().columns
                text = "\n".join(line[:width - 1] for line in text.splitlines())
            if tty and drawn[0]:
                ctx.out.write(f"\x1b[{drawn[0]}F\x1b[J")
            ctx.out.write(text + "\n" + ("" if tty else "\n"))
            ctx.out.flush()
            drawn[0] = text.count("\n") + 1

        async def redraw() -> None:
            period = max(args.interval, 0.2 if tty else 1.0)
            while True:
                await asyncio.sleep(period)
                draw()

        async def one(name: str) -> int:
            host, transport = await ctx.reach(name)
            count = 1 if args.once else args.count
            duration = max(30.0, 10 * args.interval) if args.once else args.duration
            got = await ops.stream(transport, host, ctx.bus, interval=args.interval,
                                   source=args.source, duration=duration, count=count,
                                   alerts=ctx.config.alerts)
            if not got and (args.once or args.duration is not None):
                ctx.error(f"no sample from {name}", name)
                return EXIT_FAILED
            return EXIT_OK

        painter = None if (args.json or args.once) else asyncio.create_task(redraw())
        started = time.monotonic()
        try:
            with prometheus(ctx, args):
                codes = await run_each(ctx, resolved, one)
        finally:
            remove()
            if painter is not None:
                painter.cancel()
        if not args.json and (args.once or time.monotonic() > started):
            draw()
        return summary(ctx, codes, "stats")
