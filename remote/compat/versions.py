"""Package versions as the compatibility rules compare them (PEP 440 specifier sets, release part
only)."""

from __future__ import annotations

import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """The release part of a version ("0.16.0rc1+cu129" -> (0, 16, 0)); None if absent."""
    if not text:
        return None
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def version_in(version: str | None, spec: str) -> bool:
    """`spec` is a PEP 440 specifier set like ">=0.3,<0.4" (packaging parses it); an empty spec
    matches anything installed. Only the release part of the installed version counts (a
    0.16.0rc2 build is 0.16 for these rules). A missing version never matches (a rule about a
    package needs the package)."""
    v = parse_version(version)
    if v is None:
        return False
    try:
        wanted = SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(f"bad version spec {spec!r}") from None
    if any(s.operator == "~=" or s.operator == "===" for s in wanted):
        raise ValueError(f"bad version spec {spec!r}: use >=, <=, ==, !=, > and <")
    return wanted.contains(Version(".".join(map(str, v))), prereleases=True)
