"""The model probe's reading of Python source: parsed modules, class references, and the few
expression helpers every phase shares (model_probe.py's sibling; stdlib only, Python >= 3.8).

Kept apart from the phases so that each of them (registry, class resolution, config reading,
the layer-path walk) imports one small vocabulary instead of the others.
"""

import ast

from .find_package import name_assignments


def expr_text(node):
    """A short rendering of an expression (ast.unparse is 3.9+)."""
    if node is None:
        return ""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return expr_text(node.value) + "." + node.attr
    if isinstance(node, ast.Call):
        return expr_text(node.func) + "(...)"
    if isinstance(node, ast.Constant):
        return repr(node.value)
    if isinstance(node, ast.Subscript):
        return expr_text(node.value) + "[...]"
    return type(node).__name__


def const_str(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


class Module(object):
    def __init__(self, name, path, rel, tree, is_pkg):
        self.name = name
        self.path = path
        self.rel = rel
        self.tree = tree
        self.classes = {}
        self.functions = {}
        self.imports = {}  # local name -> (module, original name)
        self.assigns = {}  # module-level name -> value node
        package = name if is_pkg else name.rpartition(".")[0]
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
        # a later (runtime) assignment wins; `_X: dict[str, str] = {...}` counts too
        self.assigns.update(name_assignments(_module_level(tree.body, runtime_only=True)))
        for node in _module_level(tree.body):  # imports under `if TYPE_CHECKING:` / try too
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    mod = base + ("." + node.module if node.module else "")
                else:
                    mod = node.module or ""
                for alias in node.names:
                    self.imports.setdefault(alias.asname or alias.name, (mod, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    self.imports.setdefault(local, (alias.name, None))

    def where(self, node):
        return "%s:%d" % (self.rel, getattr(node, "lineno", 0))


def _module_level(body, runtime_only=False):
    """Statements at module level, descending into if/try/with but not into defs; with
    runtime_only, skipping `if TYPE_CHECKING:` bodies (what the type checker sees, not Python)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.Try, ast.With)):
            fields = ["body", "orelse", "finalbody"]
            if runtime_only and isinstance(stmt, ast.If) and expr_text(stmt.test).endswith("TYPE_CHECKING"):
                fields = ["orelse"]
            for field in fields:
                yield from _module_level(getattr(stmt, field, []) or [], runtime_only)
            for handler in getattr(stmt, "handlers", []) or []:
                yield from _module_level(handler.body, runtime_only)


class ClassRef(object):
    def __init__(self, module, node):
        self.module = module
        self.node = node

    @property
    def name(self):
        return self.node.name

    @property
    def key(self):
        return (self.module.name, self.node.name)

    def where(self):
        return self.module.where(self.node)


def self_attr_targets(stmt):
    """`self.x = ...`, `self.a, self.b, self.x = ...`, `self.x: T = ...` -> [(attr, value)]."""
    out = []
    if isinstance(stmt, ast.Assign):
        targets, value = stmt.targets, stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets, value = [stmt.target], stmt.value
    else:
        return out
    for t in targets:
        elts = t.elts if isinstance(t, ast.Tuple) else [t]
        for e in elts:
            if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                out.append((e.attr, value, stmt))
    return out


def literal(node):
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return False, None


def guarded_statements(body, guards):
    """Every statement of a function body with the `if` tests that guard it: [(test, taken)]."""
    for stmt in body:
        yield stmt, guards
        if isinstance(stmt, ast.If):
            yield from guarded_statements(stmt.body, [*guards, (stmt.test, True)])
            yield from guarded_statements(stmt.orelse, [*guards, (stmt.test, False)])
        elif isinstance(stmt, (ast.With, ast.Try)):
            for field in ("body", "orelse", "finalbody"):
                yield from guarded_statements(getattr(stmt, field, []) or [], guards)


def local_value(fn, name, before):
    """The value last assigned to a local name in `fn` before `before` (same function)."""
    if fn is None:
        return None
    line = getattr(before, "lineno", 1 << 30)
    best = max((node for node in ast.walk(fn) if isinstance(node, ast.Assign) and node.lineno < line
                and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)),
               key=lambda node: node.lineno, default=None)
    return best.value if best is not None else None
