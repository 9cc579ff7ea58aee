"""Headless subcommands. Each module exposes `register(subparsers)`; the parser's `func` is an
async function taking the parsed args and returning an exit code."""
