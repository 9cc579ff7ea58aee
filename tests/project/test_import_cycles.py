"""No import cycle among the modules of console/, remote/ and pipeline/ (issue #52, point 3).

import-linter's layers order the packages, not the modules inside one layer, and it does not see
every import Python can run: here the graph counts every `import` and `from ... import` anywhere
in a module, at the top, inside a function and under `if TYPE_CHECKING:` alike (a type named is a
dependency, and a function-local import is one a refactor forgot). `from pkg import name` is an
edge to the module pkg.name when that is a module, to pkg's `__init__` otherwise. A package's
`__init__` is not counted as imported by its submodules (Python runs it first, but it is the
package's front door, not a dependency of what is behind it).

A cycle fails with its modules and every edge inside it (file:line), so the one to cut is plain.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("console", "remote", "pipeline")

Edge = tuple[str, str, str]  # (importer, imported, "path:line")


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the packages under `root`, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module of ours that importing `name` runs last: `name` itself, or its longest prefix
    that is one of ours (`remote.ops.serve.start` names a function of remote.ops.serve)."""
    parts = name.split(".")
    while parts:
        dotted = ".".join(parts)
        if dotted in modules:
            return dotted
        parts.pop()
    return None


def _imported(module: str, path: Path, modules: dict[str, Path]) -> Iterable[tuple[str, int]]:
    """(imported module of ours, line) for every import statement anywhere in the module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, modules)
                if target:
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in modules else _resolve(base, modules)
                if target:
                    yield target, node.lineno


def import_graph(root: Path = REPO) -> list[Edge]:
    """Every edge between two modules of ours, self-imports left out."""
    modules = _modules(root)
    edges: set[Edge] = set()
    for module, path in modules.items():
        for target, line in _imported(module, path, modules):
            if target != module:
                edges.add((module, target, f"{path.relative_to(root)}:{line}"))
    return sorted(edges)


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each
    sorted; the components sorted by their first module."""
    graph: dict[str, set[str]] = {}
    for source, target, _ in edges:
        graph.setdefault(source, set()).add(target)
        graph.setdefault(target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def describe(component: list[str], edges: list[Edge]) -> str:
    """A cycle as an operator reads it: its modules, then each edge inside it with file:line."""
    members = set(component)
    inside = [f"    {s} -> {t}  ({where})" for s, t, where in edges if s in members and t in members]
    return f"cycle of {len(component)} modules: {', '.join(component)}\n" + "\n".join(inside)


def test_no_import_cycle() -> None:
    edges = import_graph()
    found = cycles(edges)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(describe(c, edges) for c in found)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Not vacuous: a cycle through each kind of import this test promises to count is found
    (top-level, function-local, under TYPE_CHECKING, relative, `from pkg import module`)."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "remote" / "sub").mkdir()
    files = {
        "remote/sub/__init__.py": "",
        "remote/sub/a.py": "from . import b\n",  # relative, `from pkg import module`
        "remote/sub/b.py": "def f():\n    from remote.sub.a import thing\n",  # function-local
        "pipeline/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .y import Y\n",
        "pipeline/y.py": "import pipeline.x as x\n",  # plain import
        "console/p.py": "from console import q\n",  # `from pkg import module`, absolute
        "console/q.py": "from .p import name\n",
        "console/alone.py": "from console.p import name\nimport os\n",  # no cycle: not reported
    }
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    edges = import_graph(tmp_path)
    found = cycles(edges)
    assert found == [["console.p", "console.q"], ["pipeline.x", "pipeline.y"],
                     ["remote.sub.a", "remote.sub.b"]]
    text = describe(found[1], edges)
    assert "pipeline.x -> pipeline.y  (pipeline/x.py:3)" in text
    assert "pipeline.y -> pipeline.x  (pipeline/y.py:1)" in text
