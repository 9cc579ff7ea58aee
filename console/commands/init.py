"""`console init [PATH]`: write a commented console.toml to start from.

A first run finds no console.toml and lists only `local`; this writes one where the console
looks first (./console.toml), every key commented, so it loads as it is (no host yet) and
uncommenting one block gives a working host entry. It never overwrites: an existing file may
hold the only copy of a box's settings (exit 2, the file untouched).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from remote.errors import EXIT_OK, UsageError

TEMPLATE = Path(__file__).resolve().parent.parent / "console.toml.template"


HELP = "write a commented console.toml to start from"


def register(p: argparse.ArgumentParser) -> None:
    p.description = ("Write a commented console.toml (every key explained, no host "
                     "enabled yet). Refuses to overwrite an existing file.")
    p.add_argument("path", nargs="?", default="console.toml",
                   help="where to write it (default: ./console.toml, the first place the console looks)")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    path = Path(args.path).expanduser()
    if path.is_dir():
        path = path / "console.toml"
    text = TEMPLATE.read_text(encoding="utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as fh:  # "x": never over an existing file
            fh.write(text)
    except FileExistsError:
        raise UsageError(f"{path} already exists; not overwritten (edit it, or give another PATH)") from None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"wrote {path}: uncomment a [hosts.NAME] block, then `console hosts` lists it")
    return EXIT_OK
