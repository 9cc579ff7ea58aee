"""Errors by layer (docs/architecture.md, "Errors and retries"): one errors module per package,
its tree drawn at its top and true to the classes below it, and no exception class anywhere else
except one private to its module that never leaves it; every exception class derives from its
layer's one root, and no two classes share a name.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("console", "remote", "pipeline")
ERRORS_MODULES = ("console/errors.py", "remote/errors.py", "pipeline/errors.py",
                  "remote/probes/probe_errors.py")
_BUILTIN = {name for name, value in vars(builtins).items()
            if isinstance(value, type) and issubclass(value, BaseException)}
# Each layer's one root; the box-side scripts (stdlib only, uploaded alone) keep their own.
ROOTS = {"console": "ConsoleError", "remote": "RemoteError", "pipeline": "PipelineError"}
BOX_SIDE = "remote/probes/"
_TREE_LINE = re.compile(r"^(?P<lead>[ │├└─]*?)(?P<name>[A-Za-z_][\w.]*)(?:\s|$)")


@functools.cache  # parsed once for the module's tests (seconds here); they only read the trees
def _sources() -> dict[str, ast.Module]:
    return {str(path.relative_to(REPO)): ast.parse(path.read_text(encoding="utf-8"))
            for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))}


def _base_name(node: ast.expr) -> str:
    return ast.unparse(node).rsplit(".", 1)[-1]


def _exception_classes(sources: dict[str, ast.Module]) -> list[tuple[str, ast.ClassDef]]:
    """Every class whose bases lead (by name, through any module) to a built-in exception."""
    classes = [(rel, node) for rel, tree in sources.items() for node in ast.walk(tree)
               if isinstance(node, ast.ClassDef)]
    known = set(_BUILTIN)
    grew = True
    while grew:
        grew = False
        for _, node in classes:
            if node.name not in known and any(_base_name(b) in known for b in node.bases):
                known.add(node.name)
                grew = True
    return [(rel, node) for rel, node in classes if any(_base_name(b) in known for b in node.bases)]


def _drawn_parents(docstring: str) -> dict[str, str]:
    """The tree in an errors module's docstring (its indented lines), as class -> drawn parent."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in docstring.splitlines():
        if not line.startswith("    "):
            continue
        found = _TREE_LINE.match(line[4:])
        if found is None:
            continue
        depth = len(found["lead"])
        name = found["name"].rsplit(".", 1)[-1]
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def test_exception_classes_live_in_their_packages_errors_module() -> None:
    sources = _sources()
    found = _exception_classes(sources)
    assert len(found) > 40, found  # not vacuous: the scan sees the project's errors
    stray = [f"{rel}:{node.lineno} {node.name}" for rel, node in found
             if rel not in ERRORS_MODULES and not node.name.startswith("_")]
    assert not stray, ("exception classes outside the errors modules (move them to their "
                       f"package's errors.py, or make them private with a leading _): {stray}")


def test_a_private_exception_never_leaves_its_module() -> None:
    sources = _sources()
    texts = {rel: (REPO / rel).read_text(encoding="utf-8") for rel in sources}
    private = [(rel, node.name) for rel, node in _exception_classes(sources)
               if node.name.startswith("_")]
    assert private  # the scan sees them (stats' _Broken)
    for rel, name in private:
        word = re.compile(rf"\b{re.escape(name)}\b")
        elsewhere = [other for other, text in texts.items() if other != rel and word.search(text)]
        assert not elsewhere, f"{rel}'s private {name} is named in {elsewhere}"


def test_each_errors_module_draws_its_true_tree_at_the_top() -> None:
    for rel in ERRORS_MODULES:
        tree = ast.parse((REPO / rel).read_text(encoding="utf-8"))
        drawn = _drawn_parents(ast.get_docstring(tree) or "")
        classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
        assert classes, rel
        for node in classes:
            assert node.name in drawn, f"{rel}: {node.name} is not in the tree at the top"
            assert drawn[node.name] == _base_name(node.bases[0]), (
                f"{rel}: the tree puts {node.name} under {drawn[node.name]}, "
                f"the class derives from {_base_name(node.bases[0])}")


def test_the_tree_reader_sees_a_wrong_parent() -> None:
    """Not vacuous: a tree that puts a class under the wrong parent reads as that parent."""
    drawn = _drawn_parents("Doc.\n\n    Exception\n    ├── A\n    │   └── B     text\n    └── C\n")
    assert drawn == {"A": "Exception", "B": "A", "C": "Exception"}


def _ancestors(name: str, bases: dict[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    todo = list(bases.get(name, []))
    while todo:
        base = todo.pop()
        if base not in seen:
            seen.add(base)
            todo.extend(bases.get(base, []))
    return seen


def test_every_exception_derives_from_its_layers_root() -> None:
    sources = _sources()
    found = _exception_classes(sources)
    bases = {node.name: [_base_name(b) for b in node.bases] for _, node in found}
    wrong = []
    for rel, node in found:
        if rel.startswith(BOX_SIDE):
            continue
        root = ROOTS[rel.split("/", 1)[0]]
        if node.name != root and root not in _ancestors(node.name, bases):
            wrong.append(f"{rel}:{node.lineno} {node.name} does not derive from {root}")
    assert not wrong, wrong
    assert {node.name for _, node in found} >= set(ROOTS.values())


def test_no_two_classes_share_an_exceptions_name() -> None:
    """An exception's name names one class in console/, remote/ and pipeline/, exception or not
    (a payload once shared ConsoleError's name; the name-based scan above relies on this too)."""
    sources = _sources()
    exceptions = {node.name for _, node in _exception_classes(sources)}
    where: dict[str, list[str]] = {}
    for rel, tree in sources.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in exceptions:
                where.setdefault(node.name, []).append(f"{rel}:{node.lineno}")
    shared = {name: places for name, places in where.items() if len(places) > 1}
    assert not shared, shared
