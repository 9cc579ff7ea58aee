"""The TUI uses Textual's public API only, and what that rests on holds.

No class of console/tui overrides a private method of the library class it derives from
(Textual, textual-plot, its canvas, Rich) or reads one of that class's private attributes, and
no module imports a library's private module (issue #40): a private hook can change in any
release, and the pin in pyproject.toml then guards only the snapshots' drawing.

The app blurs a view hidden by a screen switch after the paint with a Blur alone (app.py:
_blur_hidden). Textual's own set_focus also restyles the ancestors that have `:focus-within`
rules, through a private method; the Blur is all of it only while no widget the console loads
has such a rule. A new one must bring that restyle back (publicly), so this test fails first.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

from textual.dom import DOMNode

import console.tui.app  # loads every widget class the console uses

REPO = Path(__file__).resolve().parents[3]
PRIVATE_TEXTUAL = re.compile(r"_begin_batch|_end_batch|_update_focus_styles")
LIBRARIES = ("textual", "textual_plot", "textual_hires_canvas", "rich")


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def test_no_widget_the_console_loads_has_a_focus_within_rule() -> None:
    css = {f"{c.__module__}.{c.__qualname__}": f"{getattr(c, 'DEFAULT_CSS', '')}\n{getattr(c, 'CSS', '')}"
           for c in _subclasses(DOMNode)}
    css.update({str(p.relative_to(REPO)): p.read_text()
                for p in (REPO / "console").rglob("*.tcss")})
    assert "console/tui/console.tcss" in css and "console.tui.app.ConsoleApp" in css
    assert [name for name, text in css.items() if "focus-within" in text] == []


def test_the_app_holds_paints_and_blurs_through_public_calls() -> None:
    """The private calls the app once made (issue 40), by name: none is back."""
    sources = {p: p.read_text() for p in (REPO / "console").rglob("*.py")}
    assert len(sources) > 50
    assert [str(p) for p, text in sources.items() if PRIVATE_TEXTUAL.search(text)] == []


def _library_classes() -> list[tuple[type, list[type]]]:
    """Each console.tui class with a library class among its bases, and those library bases."""
    found = []
    for info in pkgutil.walk_packages(console.tui.__path__, "console.tui."):
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                bases = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] in LIBRARIES]
                if bases:
                    found.append((cls, bases))
    return found


@functools.cache
def _source(cls: type) -> str:
    """inspect.getsource of a class, once per class: each call re-reads and re-parses its whole
    module, and the library bases (App, Widget, DOMNode, ...) are shared by most classes here
    (re-reading them for each made this test take 20 s)."""
    return inspect.getsource(cls)


def _own_methods(cls: type) -> list[str]:
    tree = ast.parse(_source(cls).lstrip())
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    return [n.name for n in body.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_no_private_library_method_is_overridden_or_private_attribute_read() -> None:
    classes = _library_classes()
    assert len(classes) > 10  # not vacuous: the views, tables, charts, screens and the app
    problems = []
    for cls, bases in classes:
        base_source = "".join(_source(b) for b in bases)
        for name in _own_methods(cls):
            if name.startswith("_") and not name.startswith("__") and any(name in vars(b) for b in bases):
                problems.append(f"{cls.__qualname__}.{name} overrides {name} of a library class")
        used = set(re.findall(r"self\._([a-z][a-z0-9_]*)", _source(cls)))
        for name in sorted(used):
            if re.search(rf"self\._{name}\b", base_source) or any(f"_{name}" in vars(b) for b in bases):
                problems.append(f"{cls.__qualname__} uses self._{name}, a library class's private")
    assert not problems, problems


def test_no_private_library_module_is_imported() -> None:
    root = Path(console.tui.__file__).parent
    private = re.compile(rf"^\s*(from|import)\s+({'|'.join(LIBRARIES)})(\.\w+)*\._", re.M)
    hits = [f"{path.relative_to(root)}: {m.group(0).strip()}" for path in sorted(root.rglob("*.py"))
            for m in private.finditer(path.read_text(encoding="utf-8"))]
    assert not hits, hits
