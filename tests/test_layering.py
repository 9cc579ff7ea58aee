"""The layering rules of design.md §1, enforced on the source rather than by convention."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _files(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def test_no_textual_outside_console() -> None:
    offenders = [
        str(p.relative_to(REPO))
        for pkg in ("remote", "pipeline")
        for p in _files(pkg)
        if "textual" in _imports(p)
    ]
    assert offenders == []


def test_textual_only_in_the_tui_package() -> None:
    offenders = [
        str(p.relative_to(REPO))
        for p in _files("console")
        if "textual" in _imports(p) and "tui" not in p.relative_to(REPO).parts
    ]
    assert offenders == []


def test_box_side_code_never_imports_the_laptop_side() -> None:
    box_side = _files("pipeline") + _files("remote/probes")
    assert box_side, "expected box-side sources"
    offenders = {
        str(p.relative_to(REPO)): sorted(_imports(p) & {"console", "remote"}) for p in box_side
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_probes_are_stdlib_only() -> None:
    import sys

    # A probe may import another stdlib-only module of remote/probes (gpu_query): the upload
    # puts it beside the probe on the box (remote/link/upload.py, probe_modules).
    siblings = {p.stem for p in _files("remote/probes")}
    allowed = set(sys.stdlib_module_names) | {"__future__", "pynvml"} | siblings
    # The all-reduce sweep needs torch by nature; it is the documented exception.
    offenders = {}
    for p in _files("remote/probes"):
        extra = _imports(p) - allowed
        if extra and p.name != "allreduce_sweep.py":
            offenders[p.name] = sorted(extra)
    assert offenders == {}


def test_remote_never_imports_console() -> None:
    offenders = [str(p.relative_to(REPO)) for p in _files("remote") if "console" in _imports(p)]
    assert offenders == []
