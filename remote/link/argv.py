"""Remote command lines are built from argv lists, never by pasting strings.

Every argument crosses the shell exactly once, through shlex.quote, so a hostile path or
container name arrives verbatim and runs nothing.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence


def shell_join(argv: Sequence[str]) -> str:
    if not argv:
        raise ValueError("empty argv")
    for arg in argv:
        if not isinstance(arg, str):
            raise TypeError(f"argv items must be str, got {type(arg).__name__}: {arg!r}")
        if "\x00" in arg:
            raise ValueError("argv items cannot contain NUL bytes")
    return " ".join(shlex.quote(a) for a in argv)


def with_env(argv: Sequence[str], env: Mapping[str, str] | None) -> list[str]:
    """Prefix `env K=V ...` so the environment travels in argv, not in a shell string."""
    if not env:
        return list(argv)
    for key in env:
        if not key or "=" in key or not key.replace("_", "a").isalnum():
            raise ValueError(f"invalid environment variable name: {key!r}")
    return ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
