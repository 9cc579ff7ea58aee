"""Class resolution: a name as a module sees it, to the class it means; bases, MRO, methods,
class attributes and whether a class implements SupportsEagle3 (model_probe.py's sibling;
stdlib only, Python >= 3.8).

ClassIndex is the half of `Source` (model_registry.py) that answers questions about classes once
their modules are parsed; it uses only `self.module(name)` and `self.parse_errors` from it.
"""

import ast

from .find_package import name_assignments
from .model_ast import ClassRef, expr_text


class ClassIndex(object):
    """Names, bases and methods of the classes of the parsed source (mixed into Source)."""

    def resolve_name(self, mod, name, depth=0):
        """A name as seen from `mod`: a ClassRef, ("external", dotted), ("function", mod, node),
        ("value", mod, node) or None."""
        if depth > 12:
            return None
        if name in mod.classes:
            return ClassRef(mod, mod.classes[name])
        if name in mod.functions:
            return ("function", mod, mod.functions[name])
        if name in mod.assigns:
            return ("value", mod, mod.assigns[name])
        if name in mod.imports:
            src, orig = mod.imports[name]
            if orig is None:
                return ("external", src)
            target = self.module(src)
            if target is None:
                if src in self.parse_errors:
                    return ("external", "%s.%s (%s)" % (src, orig, self.parse_errors[src]))
                return ("external", src + "." + orig)
            return self.resolve_name(target, orig, depth + 1)
        return None

    def resolve_expr_class(self, mod, node):
        """A class expression (a base, a class attribute): ClassRef (for an
        `as_embedding_model(Llama...)`-style wrapper, the class it adapts) or ("external", text)."""
        if isinstance(node, ast.Name):
            r = self.resolve_name(mod, node.id)
            if isinstance(r, tuple) and r[0] == "value":
                return self.resolve_expr_class(r[1], r[2])
            return r if r is not None else ("external", node.id)
        if isinstance(node, ast.Attribute):
            return ("external", expr_text(node))
        if isinstance(node, ast.Subscript):
            return self.resolve_expr_class(mod, node.value)
        if isinstance(node, ast.Call) and node.args:
            inner = self.resolve_expr_class(mod, node.args[0])
            if isinstance(inner, ClassRef):
                return inner
        return ("external", expr_text(node))

    def bases(self, cls):
        memo = self.__dict__.setdefault("_memo_bases", {})
        if cls.key in memo:
            return memo[cls.key]
        out = memo[cls.key] = []
        out.extend((b, self.resolve_expr_class(cls.module, b)) for b in cls.node.bases)
        return out

    def mro(self, cls):
        """Depth-first, left to right, resolvable vLLM classes only (enough to find methods)."""
        memo = self.__dict__.setdefault("_memo_mro", {})
        if cls.key in memo:
            return memo[cls.key]
        out, seen = [], set()
        memo[cls.key] = out

        def visit(c):
            if c.key in seen:
                return
            seen.add(c.key)
            out.append(c)
            for _, r in self.bases(c):
                if isinstance(r, ClassRef):
                    visit(r)

        visit(cls)
        return out

    def eagle3(self, cls):
        """(implements, how). Nominal: SupportsEagle3 among the bases, at any depth."""
        memo = self.__dict__.setdefault("_memo_eagle3", {})
        if cls.key not in memo:
            memo[cls.key] = self._eagle3(cls)
        return memo[cls.key]

    def _eagle3(self, cls):
        for c in self.mro(cls):
            for b, r in self.bases(c):
                if isinstance(r, ClassRef) and r.name == "SupportsEagle3":
                    if c is cls:
                        return True, "inherits SupportsEagle3 (%s)" % c.module.where(b)
                    return True, "inherits SupportsEagle3 through %s (%s)" % (c.name, c.module.where(b))
        for c in self.mro(cls):
            for stmt in c.node.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    if any(isinstance(t, ast.Name) and t.id == "supports_eagle3" for t in targets):
                        return True, "declares supports_eagle3 (%s)" % c.module.where(stmt)
        return False, "no SupportsEagle3 among the bases of %s (%s)" % (cls.name, cls.where())

    def inherits(self, cls, name):
        """Does `cls` name a class called `name` among its bases, at any depth?"""
        return any(isinstance(r, ClassRef) and r.name == name
                   for c in self.mro(cls) for _, r in self.bases(c))

    def method(self, cls, name):
        for c in self.mro(cls):
            for stmt in c.node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                    return c, stmt
        return None, None

    def class_attr(self, cls, name):
        for c in self.mro(cls):
            for target, value in name_assignments(c.node.body):
                if target == name:
                    return c, value
        return None, None
