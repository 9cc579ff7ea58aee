"""One command over several hosts (`--host a,b,c` or `--host GROUP`): the fan-out the fleet
forms of probe, patch, stats and jobs share.

Every host runs at once on its own connection; a host that fails (unreachable, refused, a bad
group member) costs one error line with its name and its own exit code, and never stops the
others. The command exits with the worst host's code (`worst`), and the closing summary says
what happened where. Every event carries its host, so `--json` tells the boxes apart.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Container, Sequence
from typing import TYPE_CHECKING

from console.context import Context
from remote.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, RemoteError

if TYPE_CHECKING:
    from remote.link.groups import Resolved

# Worst first: an interrupted run, then a refusal (a box that would break if changed), a box
# that cannot be reached, bad config, a failed probe. Numeric order except 130, documented in
# the README.
_RANK = {EXIT_INTERRUPTED: 100}

WHAT = {0: "ok", 1: "failed", 2: "config/usage error", 3: "unreachable", 4: "refused"}


def worst(codes: Sequence[int]) -> int:
    return max(codes, key=lambda c: _RANK.get(c, c), default=EXIT_OK)


def names_several(args: argparse.Namespace) -> bool:
    """`--host` names a list or a group: the command takes its fleet form."""
    if "," in args.host:
        return True
    from remote.link.hosts import load_config

    return args.host in load_config(getattr(args, "config", None)).groups


def open_fleet(args: argparse.Namespace) -> tuple[Context, Resolved]:
    """The Context of a command over `args.host` (one host, a list or a group) and what the
    value named. Bad members are reported by `run_each` as rows of their own."""
    from remote.link.groups import resolve
    from remote.link.hosts import load_config

    config = load_config(getattr(args, "config", None))
    resolved = resolve(config, args.host)
    return Context.from_args(args, hosts=resolved.names, config=config), resolved


async def run_each(ctx: Context, resolved: Resolved,
                   fn: Callable[[str], Awaitable[int]]) -> dict[str, int]:
    """`fn(host)` on every host at once; each host's exit code, the bad members' included (2)."""
    codes: dict[str, int] = {}
    for name, why in resolved.problems:
        ctx.error(why, name, exit_code=EXIT_USAGE)
        codes[name] = EXIT_USAGE

    async def one(name: str) -> None:
        try:
            codes[name] = await fn(name)
        except RemoteError as exc:
            ctx.error(str(exc), name, exit_code=exc.exit_code)
            codes[name] = exc.exit_code

    await asyncio.gather(*(one(n) for n in resolved.names))
    order = [*resolved.names, *(n for n, _ in resolved.problems)]
    return {n: codes[n] for n in order if n in codes}


def summary(ctx: Context, codes: dict[str, int], what: str = "") -> int:
    """The closing line (also an event: `--json` and the session have it) and the exit code."""
    parts = [f"{h} {WHAT.get(c, f'exit {c}')}" for h, c in codes.items()]
    code = worst(list(codes.values()))
    line = f"{what}{': ' if what else ''}{', '.join(parts)}"
    if code == EXIT_OK:
        ctx.info(line, hosts=codes)
    else:
        ctx.error(line, hosts=codes, exit_code=code)
    return code


def aligned(rows: Sequence[Sequence[str]], right: Container[int] = ()) -> str:
    """Columns padded to their widest cell, two spaces apart; the columns numbered in `right`
    (numbers) right-aligned: every plain-text table the commands print."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if i in right else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
                     for r in rows)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows under a header; in each column but the first (the host), a cell that differs from the
    column's most common value is marked with `*`, and a last line names those columns."""
    marked: list[list[str]] = [list(r) for r in rows]
    differ: list[str] = []
    for col in range(1, len(header)):
        values = [r[col] for r in rows]
        common, _ = Counter(values).most_common(1)[0] if values else ("", 0)
        if len(set(values)) > 1:
            differ.append(header[col])
            for r in marked:
                if r[col] != common:
                    r[col] = f"{r[col]} *"
    lines = [aligned([header, *marked])]
    if differ:
        lines.append(f"* differs from the other hosts: {', '.join(differ)}")
    elif len(rows) > 1:
        lines.append("all hosts alike")
    return "\n".join(lines)
