"""Every `console` command line the README and docs/ show parses, and every flag a synopsis line
documents exists on each command it names (issue 14: `console probe --accept-new-host-key` used
to exit 2 although the README and the host-key error tell users to pass it)."""

from __future__ import annotations

import argparse
import itertools
import re
import shlex
from pathlib import Path

import pytest

from console.argtypes import command_lines, subcommands
from console.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Placeholders of the synopsis lines, as an operator would fill them in.
FILL = {"DIR": "/tmp/p", "H": "box", "P.toml": "p.toml", "STAGE": "train", "RUN": "r1", "N": "n", "D": "/tmp",
        "K=V": "A=B", "S": "1", "PATH": "/m", "NAME": "x"}


def doc_command_lines() -> list[tuple[str, str]]:
    """(where, line) for each console command line: in fenced blocks, and inline `console ...`."""
    found = []
    for doc in DOCS:
        fenced = False
        for n, raw in enumerate(doc.read_text().splitlines(), 1):
            if raw.strip().startswith("```"):
                fenced = not fenced
                continue
            where = f"{doc.name}:{n}"
            if fenced and re.match(r"console(\s|$)", raw.strip()):
                found.append((where, raw.split("#", 1)[0].strip()))
            elif not fenced:  # prose naming a command (`console jobs tail`) is not a command line
                found += [(where, m) for m in re.findall(r"`(console(?: [^`]*)?)`", raw)
                          if " -" in m]
    return found


def expand(line: str) -> list[list[str]]:
    """The concrete command lines a synopsis stands for: `a|b` alternatives each, optional
    `[...]` parts included, `...` dropped."""
    line = re.sub(r"\[([^\]]*)\]", r" \1 ", line).replace("...", " ")
    options = []
    for tok in shlex.split(line)[1:]:
        options.append([FILL.get(alt, alt) for alt in tok.split("|")] if "|" in tok and
                       not tok.startswith("-") else [FILL.get(tok, tok)])
    return [list(c) for c in itertools.product(*options)] or [[]]


def subparser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The deepest (sub)command parser the leading words of a command line name."""
    for word in words:
        subs = subcommands(parser)
        if not subs:
            break
        if word in subs:  # anything else: an option or its value, a positional
            parser = subs[word]
    return parser


LINES = doc_command_lines()


def test_the_docs_show_command_lines() -> None:
    assert len(LINES) > 25


@pytest.mark.parametrize(("where", "line"), LINES, ids=[w for w, _ in LINES])
def test_documented_command_line_parses_or_names_real_flags(where: str, line: str) -> None:
    parser = build_parser()
    for argv in expand(line):
        flags = [w.split("=")[0] for w in argv if w.startswith("--") and w != "--"]
        target = subparser(parser, argv)
        known = set(target._option_string_actions)
        missing = [f for f in flags if f not in known and not _parent_knows(parser, argv, f)]
        assert not missing, f"{where}: `console {' '.join(argv)}`: {missing} not accepted"
        if "|" in line or "..." in line or "[" in line:
            continue  # a synopsis: its flags are checked; filled in it may lack required ones
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"{where}: `{line}` does not parse (exit {exc.code})")


def _parent_knows(parser: argparse.ArgumentParser, argv: list[str], flag: str) -> bool:
    """A flag given before a verb (`console jobs --host H tail`) belongs to the parent."""
    words = [w for w in argv if not w.startswith("-")]
    return any(flag in subparser(parser, words[:i])._option_string_actions
               for i in range(len(words)))


def test_probe_takes_accept_new_host_key() -> None:
    args = build_parser().parse_args(["probe", "env", "--host", "box", "--accept-new-host-key"])
    assert args.accept_new_host_key is True


def test_every_command_that_reaches_a_host_takes_the_host_key_flag() -> None:
    reaching = [(" ".join(("console", *words)), p) for words, p in command_lines(build_parser())
                if "--host" in p._option_string_actions]
    assert len(reaching) >= 8
    lacking = [path for path, p in reaching
               if "--accept-new-host-key" not in p._option_string_actions]
    assert not lacking
