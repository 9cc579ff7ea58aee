"""`console replay FILE`: the TUI fed from a session file, or --print for plain lines."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from contextlib import suppress
from typing import TYPE_CHECKING, BinaryIO

from remote.errors import EXIT_FAILED, EXIT_OK, UsageError

TORN_LAST_LINE = "last line is incomplete"  # console/sessions/source.py's warning

# The reader and the decoders (zstandard, msgspec) are imported where they run:
# `console replay --help` loads none of it.
if TYPE_CHECKING:
    from console.sessions.reader import SessionReader


HELP = "replay a recorded session (TUI, or --print)"


def register(p: argparse.ArgumentParser) -> None:
    p.description = ("Replay a recorded session file in the TUI, or print it.")
    p.add_argument("file", help="session file (.jsonl or .jsonl.zst)")
    p.add_argument("--print", dest="print_", action="store_true", help="print events and exit (no TUI)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON event per line and exit (implies --print)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Not a coroutine: printing a file needs no event loop, and without one the command never
    imports asyncio (console/cli.py runs a coroutine only when a command returns one); the TUI
    starts its own loop."""
    from console.sessions.reader import SessionReader
    from remote.spine.intake import corrupt
    from remote.spine.sanitize import visible

    if not args.print_ and not args.json and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("replay needs a terminal for the TUI; use --print (or --json) to print "
                         "the session instead")
    # a printer never seeks: a cold open need not look for markers (console/sessions/reader.py)
    reader = SessionReader(args.file, find_markers=not (args.print_ or args.json))
    try:
        if not args.print_ and not args.json:
            import asyncio

            from console.tui.launch import run_replay_app

            return asyncio.run(run_replay_app(reader))
        h = reader.header
        if not args.json:
            # the header is the file's text: its host names drawn, never obeyed
            note = reader.redaction_note()
            redaction = f", {note}" if note else ""
            print(visible(f"# session started {h.started:%Y-%m-%d %H:%M:%S} UTC, hosts: "
                          f"{', '.join(h.hosts) or '-'}, {len(reader)} records{redaction}"),
                  flush=True)
            # records, not events: a log block is one job.lines record (docs/sessions.md)
        bad = print_session(reader, sys.stdout.buffer, as_json=args.json)
        if bad is None:
            return EXIT_OK  # the reader went away (`| head`): nothing more to say to anyone
        for i, why in bad[:20]:
            reader.warnings.append(corrupt(i, why))
        if len(bad) > 20:
            reader.warnings.append(f"... and {len(bad) - 20:,} more corrupt events skipped")
        return warned(args.file, reader.warning_summary())
    finally:
        reader.close()


def warned(path: str | os.PathLike[str], warnings: list[str]) -> int:
    """The warnings on stderr, and the exit code they make (replay and report alike). Exit 1
    when events were lost to damage (corrupt lines, a damaged compressed frame, for the report
    a chart left out): a script must not take a partial replay for the session. A torn last
    line alone is what every killed recorder leaves: warned about, exit 0 (docs/sessions.md,
    Damage)."""
    from remote.spine.sanitize import visible

    for warning in warnings:
        print(visible(f"warning: {path}: {warning}"), file=sys.stderr)
    return EXIT_FAILED if [w for w in warnings if not w.startswith(TORN_LAST_LINE)] else EXIT_OK


def print_session(reader: SessionReader, out: BinaryIO, *, as_json: bool
                  ) -> list[tuple[int, str]] | None:
    """Every event, a segment at a time, written as bytes in one call per segment. Returns the
    bad lines, or None when the reader of our output went away (stdout closed): stdout is then
    pointed at /dev/null so that the interpreter's final flush has nothing to complain about."""
    from console.sessions.decode import valid_json_block
    from console.sessions.human import human_bytes

    bad: list[tuple[int, str]] = []
    # Nothing printed here makes reference cycles; a million decoded records would otherwise
    # run the cyclic collector thousands of times for nothing.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        lines = valid_json_block if as_json else human_bytes
        for first, count, data in reader.segment_data():
            out.write(lines(data, first, count, bad))
        out.flush()
    except BrokenPipeError:
        _silence_stdout()
        return None
    finally:
        if gc_was_enabled:
            gc.enable()
    return bad


def _silence_stdout() -> None:
    with suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
