"""Host groups: `[groups] gpu = ["a", "b", "c"]` in console.toml, and `--host a,b,c` / `--host GROUP`.

Why members are checked when a group is used, not when the file loads: a fleet is where one
entry goes stale (a box renamed, a typo). Refusing the whole console.toml for it would stop every
command on every box; instead the bad member costs one clear line and the other boxes still
answer. What cannot be meant any way (a group that is not a list of names, a group and a host
with one name) is refused when the file loads, as any other config error (remote/link/hosts.py parse_groups).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from remote.errors import UsageError

if TYPE_CHECKING:
    from remote.link.hosts import Config


@dataclass
class Resolved:
    """The hosts a `--host` value names, in order, each once; and the members that could not be
    used, each as (name, why) for one line of its own."""

    names: list[str]
    problems: list[tuple[str, str]] = field(default_factory=list)


def resolve(config: Config, spec: str) -> Resolved:
    """`a`, `a,b,c`, `GROUP` or a mix. A name typed on the command line that is neither a host
    nor a group is a usage error (exit 2): a typo there is caught before anything runs."""
    items = [s.strip() for s in spec.split(",")]
    if not spec.strip() or any(not s for s in items):
        raise UsageError(f"--host {spec!r}: expected NAME, NAME,NAME,... or a group")
    out = Resolved(names=[])
    for item in items:
        if item in config.groups:
            _expand(config, item, (), out)
        else:
            config.host(item)  # ConfigError (exit 2) naming the known hosts
            _add(out, item)
    return out


def _add(out: Resolved, name: str) -> None:
    if name not in out.names:
        out.names.append(name)


def _expand(config: Config, group: str, path: tuple[str, ...], out: Resolved) -> None:
    for member in config.groups[group]:
        if member == group:
            out.problems.append((member, f"group {group} names itself (ignored)"))
        elif member in path:
            out.problems.append((member, f"group {group} names {member}, which contains it "
                                 "(a cycle; ignored)"))
        elif member in config.groups:
            _expand(config, member, (*path, group), out)
        elif member in config.hosts or member == "local":
            _add(out, member)
        else:
            known = ", ".join(sorted({*config.hosts, "local"}))
            out.problems.append((member, f"group {group}: no such host {member!r} "
                                 f"(known: {known})"))
