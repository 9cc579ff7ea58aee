"""argparse types for numbers an operator types: refused at parse time (usage, exit 2) when
they are not finite or out of range, instead of reaching a remote helper as `nan` (which then
fails with an unrelated message) or an `int(nan)` deep in a timeout. And the CLI's subcommands,
added through `add_subcommands` so that `command_lines` can list every command line: argparse
answers that only through its private action class."""

from __future__ import annotations

import argparse
import math
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol


def _number(kind: type, low: float, *, strict: bool, what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


positive_float = _number(float, 0, strict=True, what="a positive number")
nonneg_float = _number(float, 0, strict=False, what="a number >= 0")
positive_int = _number(int, 0, strict=True, what="a positive integer")
nonneg_int = _number(int, 0, strict=False, what="an integer >= 0")


def tcp_port(text: str) -> int:
    """A TCP port to listen on: 0 (any free one) to 65535."""
    value = nonneg_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535)")
    return int(value)


class Subcommands(Protocol):
    """What `ArgumentParser.add_subparsers()` returns, as a command with verbs uses it
    (console/context.py: add_verbs): the public face of argparse's action (its class is
    private)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...

    @property
    def choices(self) -> Mapping[str, argparse.ArgumentParser]: ...  # name -> its parser


_ADDED: weakref.WeakKeyDictionary[argparse.ArgumentParser, Subcommands] = (
    weakref.WeakKeyDictionary())


def add_subcommands(parser: argparse.ArgumentParser, **kwargs: Any) -> Subcommands:
    """`parser.add_subparsers(**kwargs)`, kept for `subcommands(parser)`: every parser of the
    CLI that has subcommands gets them here (console/cli.py, console/context.py add_verbs)."""
    sub: Subcommands = parser.add_subparsers(**kwargs)
    _ADDED[parser] = sub
    return sub


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """`parser`'s subcommands' parsers by name, in the order they were added ({} for none)."""
    sub = _ADDED.get(parser)
    return dict(sub.choices) if sub is not None else {}


def command_lines(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
                  ) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command line under `parser` as (its words after `console`, its parser), `parser`
    itself first, each command before its subcommands: what the help and bad-input tests walk."""
    lines = [(words, parser)]
    for name, sub in subcommands(parser).items():
        lines += command_lines(sub, (*words, name))
    return lines


def add_sampling_options(p: argparse.ArgumentParser, *, several: bool = False) -> None:
    """--temperature and --seed, for `bench run` (one temperature) and `bench matrix` (a
    comma-separated list)."""
    if several:
        p.add_argument("--temperature", default="0", metavar="T,T",
                       help="comma-separated sampling temperatures (default 0: greedy)")
    else:
        p.add_argument("--temperature", type=nonneg_float, default=0.0, metavar="T",
                       help="sampling temperature (default 0: greedy); above 0 each request "
                       "carries its own seed, so a rerun samples the same tokens")
    p.add_argument("--seed", type=nonneg_int, default=0,
                   help="request i of a sweep samples with seed SEED+i when T > 0 (default 0)")


def add_request_options(p: argparse.ArgumentParser, *, max_tokens: int, warmup: str) -> None:
    """What each request of `bench run` and `bench matrix` is: the prompts, its length, the
    warmup before measuring (`warmup`: when it is sent), and the per-request timeout."""
    p.add_argument("--prompts", metavar="FILE",
                   help="JSONL of prompts or conversations (default: the shipped prompt set)")
    p.add_argument("--max-tokens", type=positive_int, default=max_tokens,
                   help=f"output tokens per request (default {max_tokens})")
    p.add_argument("--warmup", type=nonneg_int, default=1,
                   help=f"unmeasured requests {warmup} (default 1)")
    p.add_argument("--stop-at-eos", action="store_true",
                   help="end requests at the model's end token (as the offline evaluate does) "
                   "instead of a fixed length")
    p.add_argument("--timeout", type=positive_float, default=600.0, help="per-request timeout, seconds")


def add_engine_options(p: argparse.ArgumentParser, *, start: str) -> None:
    """How `serve start` and `bench matrix` start vLLM on the box (`start`: what is waited for)."""
    p.add_argument("--python", metavar="PATH",
                   help="the python with vLLM on the box (default: the host's python)")
    p.add_argument("--vllm-args", metavar="'ARGS'",
                   help="extra vLLM arguments, one shell-quoted string after = (e.g. "
                   "--vllm-args='--enforce-eager'); default for --demo: --enforce-eager")
    p.add_argument("--start-timeout", type=positive_float, default=1800.0,
                   help=f"seconds to wait for {start} (default 1800)")


def add_out_options(p: argparse.ArgumentParser, out: str, force: str, metavar: str = "FILE",
                    **kwargs: Any) -> None:
    """--out (where the command writes: `out` says the default) and --force (what it may then
    replace), never replaced without it."""
    p.add_argument("--out", metavar=metavar, help=out, **kwargs)
    p.add_argument("--force", action="store_true", help=force)


def add_pipeline_source(p: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup,
                        of: str = "") -> None:
    """--pipeline FILE or --demo: which pipeline run a command serves, measures or probes (`of`:
    which part of it, e.g. "the target of ")."""
    p.add_argument("--pipeline", metavar="FILE", help=f"{of}this pipeline config (TOML on this machine)")
    p.add_argument("--demo", action="store_true", help=f"{of}the demo built by `console run --demo` on this host")
