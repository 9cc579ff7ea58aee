"""`console report SESSION [--out report.html]`: one self-contained HTML file of a recorded run.

Charts are drawn with matplotlib (the optional extra `report`: pip install
'eagle3-console[report]'; `make test` and `make demo` install it) and embedded as data URIs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from console.argtypes import add_out_options
from console.commands.replay import warned
from pipeline.units import fmt_bytes
from remote.errors import UsageError

HELP = "write a self-contained HTML report of a recorded session"


def register(p: argparse.ArgumentParser) -> None:
    p.description = ("Write one HTML file (charts embedded) with the session's hosts and "
                     "environments, stages, loss curve, offline vs served acceptance, speedup vs "
                     "concurrency, patch state and the commands that ran.")
    p.add_argument("session", help="a session file (.jsonl or .jsonl.zst)")
    add_out_options(p, "where to write it (default: SESSION with .html)",
                    "overwrite PATH even if the console did not write it (never the session read)", "PATH")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    try:
        import matplotlib  # noqa: F401  (the optional extra, checked before any work)
    except ImportError:
        raise UsageError("console report needs matplotlib: pip install 'eagle3-console[report]'") from None
    from console.report.page import render
    from remote.link.out_files import claim, write_claimed

    session = Path(args.session)
    name = session.name.removesuffix(".zst").removesuffix(".jsonl")
    out = Path(args.out) if args.out else session.with_name(name + ".html")
    # Judged before the session is read: a refused path costs nothing and changes nothing.
    target = claim(out, force=args.force, ours=_is_report, source=session, what="report")
    warnings: list[str] = []
    text = render(session, warnings)
    try:
        write_claimed(target, text.encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"report written: {out} ({fmt_bytes(len(text))})")
    # The rule of every reader: the page is written, but it is not the whole session.
    return warned(session, warnings)


def _is_report(path: Path) -> bool:
    """An earlier page of `console report` (its generator mark in the first bytes)."""
    from console.report.page import GENERATOR

    try:
        with path.open("rb") as fh:
            return GENERATOR.encode() in fh.read(512)
    except OSError:
        return False
