"""One byte convention (pipeline/units.py, docs/architecture.md "Byte sizes"): IEC units, so no
string that a screen, line or report writes names a decimal byte unit (KB, MB, GB, TB). Docstrings
and comments may (they cite measurements); the box-side probes report raw numbers.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DECIMAL_UNIT = re.compile(r"\b[KMGT]B\b")


def _docstrings(tree: ast.Module) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def _decimal_units(text: str, rel: str) -> list[str]:
    tree = ast.parse(text)
    docs = _docstrings(tree)
    return [f"{rel}:{node.lineno} {node.value[:60]!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs and DECIMAL_UNIT.search(node.value)]


def test_no_string_writes_a_decimal_byte_unit() -> None:
    found = []
    scanned = 0
    for package in ("console", "remote", "pipeline"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if not rel.startswith("remote/probes/"):
                scanned += 1
                found += _decimal_units(path.read_text(encoding="utf-8"), rel)
    assert scanned > 100
    assert not found, f"use pipeline.units.fmt_bytes (KiB, MiB, GiB): {found}"


def test_the_scan_sees_a_decimal_unit_in_an_f_string() -> None:
    """Not vacuous: the 1000-based formatter this replaced would be found."""
    old = '"""Doc: 1.5 GB."""\nx = 1\nline = f"{x / 1e9:.1f} GB"\n'
    assert _decimal_units(old, "old.py") == ["old.py:3 ' GB'"]
