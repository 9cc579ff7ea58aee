"""Errors by layer (docs/architecture.md, "Errors and retries"): one errors module per package,
its tree drawn at its top and true to the classes below it, and no exception class anywhere else
except one private to its module that never leaves it.
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
    assert private  # the scan sees them (stats' _Broken, online training's _Terminated)
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
