"""Where does this model keep its decoder layers in the installed vLLM, and does it speak EAGLE-3?

Runs on the box with only the container's python (stdlib, Python >= 3.8). It never imports vLLM
(that needs GPUs and minutes): it reads vLLM's source with `ast`, follows the model registry to
the class, the class to its bases and to the attribute that builds its text model, and so on until
the class that owns the decoder layers. Anything it cannot follow is reported with the file and
line where it stopped, never guessed.

Output: JSON lines on stdout, `{"kind": "result", "probe": "model", "result": {...}}`.
  model_probe.py --model /path/to/hf_dir_or_config.json
  model_probe.py --arch LlamaForCausalLM [--vllm-root DIR]
  model_probe.py --all                 (one result per registered architecture)
  model_probe.py --family kimi         (the generic source diagnostic, probe "source")
"""

from __future__ import print_function

import argparse
import ast
import importlib.util
import json
import os
import platform
import signal
import sys
import traceback

MODELS_PKG = "vllm.model_executor.models"
# Attributes through which a wrapper holds its text model, in the order they are tried when the
# source does not say it explicitly (init_vllm_registered_model says it explicitly).
TEXT_ATTRS = ("model", "language_model", "text_model", "llm", "lm", "transformer", "decoder",
              "backbone", "text_decoder", "encoder")
LAYER_ATTRS = ("layers", "h", "blocks", "layer")
MAX_DEPTH = 8


class Stop(Exception):
    """Resolution stopped at a known place; carries the reason and the file:line."""

    def __init__(self, reason, where=None, status="unresolved"):
        Exception.__init__(self, reason)
        self.reason = reason
        self.where = where
        self.status = status  # "unresolved" | "needs_config"


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
        for node in _module_level(tree.body, runtime_only=True):
            if isinstance(node, ast.Assign):  # a later (runtime) assignment wins
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.assigns[t.id] = node.value
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
                for inner in _module_level(getattr(stmt, field, []) or [], runtime_only):
                    yield inner
            for handler in getattr(stmt, "handlers", []) or []:
                for inner in _module_level(handler.body, runtime_only):
                    yield inner


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


class Source(object):
    """The installed vLLM package, parsed lazily, one module at a time (parse once, reuse)."""

    def __init__(self, root):
        self.root = os.path.abspath(root)  # the `vllm` package directory
        self.top = os.path.dirname(self.root)
        self._modules = {}
        self.parse_errors = {}
        self.version = read_version(self.root)

    def module(self, name):
        if name in self._modules:
            return self._modules[name]
        mod = None
        if name == "vllm" or name.startswith("vllm."):
            rel = name.replace(".", os.sep)
            for cand, is_pkg in ((rel + ".py", False), (os.path.join(rel, "__init__.py"), True)):
                path = os.path.join(self.top, cand)
                if os.path.isfile(path):
                    try:
                        with open(path, "rb") as fh:
                            tree = ast.parse(fh.read(), path)
                    except (SyntaxError, ValueError, OSError) as exc:
                        # e.g. newer syntax than this python parses: say so where it is used
                        self.parse_errors[name] = "%s:%s: cannot parse with Python %s: %s" % (
                            cand.replace(os.sep, "/"), getattr(exc, "lineno", "?"), platform.python_version(),
                            getattr(exc, "msg", exc))
                        break
                    mod = Module(name, path, cand.replace(os.sep, "/"), tree, is_pkg)
                    break
        self._modules[name] = mod
        return mod

    # -- registry ---------------------------------------------------------------------------
    def registry(self):
        if "_registry" in self.__dict__:
            return self._registry
        mod = self.module(MODELS_PKG + ".registry")
        if mod is None and MODELS_PKG + ".registry" in self.parse_errors:
            raise Stop(self.parse_errors[MODELS_PKG + ".registry"])
        if mod is None:
            raise Stop("no model registry at vllm/model_executor/models/registry.py under " + self.root)
        cache = {}

        def evaluate(name, seen):
            if name in cache:
                return cache[name]
            node = mod.assigns.get(name)
            out = {}
            if not isinstance(node, ast.Dict) or name in seen:
                return out
            for k, v in zip(node.keys, node.values):  # noqa: B905 (strict= is 3.10+)
                if k is None:  # **splat
                    if isinstance(v, ast.Name):
                        out.update(evaluate(v.id, seen | {name}))
                    continue  # comprehensions re-list entries that are present elsewhere
                key = const_str(k)
                if key is None or not isinstance(v, ast.Tuple) or len(v.elts) != 2:
                    continue
                m, c = const_str(v.elts[0]), const_str(v.elts[1])
                if m and c:
                    out[key] = (m, c, mod.where(k))
            cache[name] = out
            return out

        if "_VLLM_MODELS" in mod.assigns:
            reg = evaluate("_VLLM_MODELS", frozenset())
        else:
            reg = {}
            for n in mod.assigns:
                if n.startswith("_") and n.endswith("_MODELS"):
                    reg.update(evaluate(n, frozenset()))
        self._registry = reg
        return reg

    # -- names to classes -------------------------------------------------------------------
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
        """A class expression (a base, a class attribute): ClassRef, ("external", text) or
        ("adapter", fn, ClassRef) for `as_embedding_model(Llama...)`-style wrappers."""
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
                return ("adapter", expr_text(node.func), inner)
        return ("external", expr_text(node))

    def bases(self, cls):
        memo = self.__dict__.setdefault("_memo_bases", {})
        if cls.key in memo:
            return memo[cls.key]
        out = memo[cls.key] = []
        for b in cls.node.bases:
            r = self.resolve_expr_class(cls.module, b)
            if isinstance(r, tuple) and r[0] == "adapter":
                r = r[2]
            out.append((b, r))
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
        for c in self.mro(cls):
            for _, r in self.bases(c):
                if isinstance(r, ClassRef) and r.name == name:
                    return True
        return False

    def method(self, cls, name):
        for c in self.mro(cls):
            for stmt in c.node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                    return c, stmt
        return None, None

    def class_attr(self, cls, name):
        for c in self.mro(cls):
            for stmt in c.node.body:
                if isinstance(stmt, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                    return c, stmt.value
                if (isinstance(stmt, ast.AnnAssign) and stmt.value is not None
                        and isinstance(stmt.target, ast.Name) and stmt.target.id == name):
                    return c, stmt.value
        return None, None


def read_version(root):
    for name in ("_version.py", "version.py"):
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as fh:
                tree = ast.parse(fh.read(), path)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and const_str(node.value):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if "__version__" in names or "version" in names:
                    return node.value.value
    try:
        import importlib.metadata as md  # 3.8+

        return md.version("vllm")
    except Exception:
        return None


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


class Resolver(object):
    def __init__(self, source, hf_config=None):
        self.src = source
        self.hf = hf_config or {}

    # -- what a class assigns to self --------------------------------------------------------
    def assignments(self, cls):
        """attr -> list of (value node, module, function node, statement), from __init__ of the
        class and its bases (derived first) and the self-methods __init__ calls directly."""
        memo = self.src.__dict__.setdefault("_memo_assignments", {})
        if cls.key not in memo:
            memo[cls.key] = self._assignments(cls)
        return memo[cls.key]

    def _assignments(self, cls):
        out = {}
        for c in self.src.mro(cls):
            init = None
            for stmt in c.node.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
                    init = stmt
            if init is None:
                continue
            funcs = [(c, init)]
            for node in ast.walk(init):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
                    hc, helper = self.src.method(cls, node.func.attr)
                    if helper is not None and helper is not init and helper.name.startswith("_"):
                        funcs.append((hc, helper))
            for fc, fn in funcs:
                for node in ast.walk(fn):
                    for attr, value, stmt in self_attr_targets(node):
                        lst = out.setdefault(attr, [])
                        if not any(v is value for v, _, _, _ in lst):
                            lst.append((value, fc, fn, stmt))
        return out

    def layers_attr(self, assigns):
        found = []
        for attr, values in assigns.items():
            for value, c, _, stmt in values:
                if isinstance(value, ast.Call):
                    fname = expr_text(value.func)
                    if fname.endswith("make_layers"):
                        # make_layers returns (start, end, modules): only the last target holds them
                        tgt = stmt.targets[0] if isinstance(stmt, ast.Assign) else None
                        if isinstance(tgt, ast.Tuple):
                            last = tgt.elts[-1]
                            if not (isinstance(last, ast.Attribute) and last.attr == attr):
                                continue
                        found.append((0, attr, c.module.where(stmt), "make_layers"))
                    elif fname.endswith("ModuleList") and attr in LAYER_ATTRS:
                        found.append((1, attr, c.module.where(stmt), "nn.ModuleList"))
        if not found:
            return None
        found.sort(key=lambda f: (f[0], f[1] != "layers"))
        return found[0]

    # -- expressions that build a sub-model ---------------------------------------------------
    def value_classes(self, value, cls, fn, mod_of, depth=0):
        """Classes an assigned value can be. Raises Stop where the source cannot settle it.
        `cls` is the instance's class (self.* lookups start there); `mod_of` the module whose
        names `value` uses."""
        where = mod_of.where(value)
        if depth > 6:
            raise Stop("expression too deep to follow: " + expr_text(value), where)
        if isinstance(value, ast.IfExp):
            out = []
            for branch in (value.body, value.orelse):
                try:
                    out.extend(self.value_classes(branch, cls, fn, mod_of, depth + 1))
                except Stop:
                    pass
            if not out:
                raise Stop("neither branch of a conditional resolves: " + expr_text(value), where)
            return out
        if isinstance(value, ast.Name):
            local = self._local_value(fn, value.id, value)
            if local is not None:
                return self.value_classes(local, cls, fn, mod_of, depth + 1)
            passed = self._param_value(cls, fn, value.id)
            if passed is not None:
                expr, pfn, pmod = passed
                return self.value_classes(expr, cls, pfn, pmod, depth + 1)
            r = self.src.resolve_expr_class(mod_of, value)
            if isinstance(r, ClassRef):
                return [r]
            if isinstance(r, tuple) and r[0] == "adapter":
                return [r[2]]
            raise Stop("%s is not a vLLM class (%s)" % (value.id, r[1] if isinstance(r, tuple) else r), where)
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
            c, v = self.src.class_attr(cls, value.attr)
            if v is not None:
                return self.value_classes(v, cls, None, c.module, depth + 1)
            raise Stop("self.%s is not a class attribute it can read" % value.attr, where)
        if not isinstance(value, ast.Call):
            raise Stop("cannot follow " + expr_text(value), where)
        func = value.func
        fname = expr_text(func)
        if fname.split(".")[-1] == "init_vllm_registered_model":
            return self.registered(value, mod_of)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            c, meth = self.src.method(cls, func.attr)
            if meth is not None:
                return self.returns(meth, cls, depth, c.module)
            c, v = self.src.class_attr(cls, func.attr)
            if v is not None:
                return self.value_classes(v, cls, None, c.module, depth + 1)
            raise Stop("self.%s is neither a method nor a class attribute of %s" % (func.attr, cls.name), where)
        if isinstance(func, ast.Name):
            local = self._local_value(fn, func.id, value)
            if local is not None:
                return self.value_classes(local, cls, fn, mod_of, depth + 1)
            passed = self._param_value(cls, fn, func.id)
            if passed is not None:
                expr, pfn, pmod = passed
                return self.value_classes(expr, cls, pfn, pmod, depth + 1)
            r = self.src.resolve_name(mod_of, func.id)
            if isinstance(r, ClassRef):
                return [r]
            if isinstance(r, tuple) and r[0] == "function":
                return self.returns(r[2], cls, depth, r[1], helper=True)
            if isinstance(r, tuple) and r[0] == "value":
                inner = self.src.resolve_expr_class(r[1], r[2])
                if isinstance(inner, ClassRef):
                    return [inner]
                if isinstance(inner, tuple) and inner[0] == "adapter":
                    return [inner[2]]
            raise Stop("%s(...) is not a vLLM class or helper it can read (%s)"
                       % (func.id, r[1] if isinstance(r, tuple) else "unknown name"), where)
        if isinstance(func, ast.Attribute):
            raise Stop("built at runtime by %s(...), outside vLLM's model classes" % fname, where)
        raise Stop("cannot follow call " + fname, where)

    def returns(self, fn, cls, depth, module, helper=False):
        out = []
        stops = []
        for node in ast.walk(fn):
            if isinstance(node, ast.Return) and node.value is not None:
                try:
                    out.extend(self._returns_in_module(node.value, module, fn, depth) if helper
                               else self.value_classes(node.value, cls, fn, module, depth + 1))
                except Stop as exc:
                    stops.append(exc)
        if out:
            return out
        if stops:
            raise stops[0]
        raise Stop("%s returns nothing it can follow" % fn.name, module.where(fn))

    def _returns_in_module(self, value, module, fn, depth):
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            r = self.src.resolve_name(module, value.func.id)
            if isinstance(r, ClassRef):
                return [r]
        raise Stop("helper %s builds its model in a way it cannot follow" % fn.name, module.where(value))

    def registered(self, call, mod):
        """init_vllm_registered_model(...): the architecture is in the call, or in the HF config."""
        kws = {k.arg: k.value for k in call.keywords if k.arg}
        archs = kws.get("architectures")
        names = None
        if isinstance(archs, (ast.List, ast.Tuple)):
            names = [const_str(e) for e in archs.elts]
            if not all(names):
                names = None
        if names is None:
            hf = kws.get("hf_config")
            hf_text = expr_text(hf)
            if archs is None and hf is not None and hf_text.endswith("text_config"):
                text = self.hf.get("text_config") if isinstance(self.hf.get("text_config"), dict) else None
                if text and text.get("architectures"):
                    names = list(text["architectures"])
                else:
                    raise Stop("architecture comes from the HF config at runtime (%s.architectures); "
                               "give --model to settle it" % hf_text, mod.where(call), "needs_config")
            else:
                raise Stop("architecture comes from the HF config at runtime (%s); give --model to settle it"
                           % (expr_text(archs) if archs is not None else hf_text or "hf_config"),
                           mod.where(call), "needs_config")
        reg = self.src.registry()
        out = []
        for n in names:
            if n not in reg:
                raise Stop("architecture %s is not in the registry" % n, mod.where(call))
            out.append(self.class_of(n))
        return out

    def class_of(self, arch):
        reg = self.src.registry()
        modname, clsname, where = reg[arch]
        # registry entries are relative to the models package unless fully qualified (0.33+)
        full = modname if modname.startswith("vllm.") else MODELS_PKG + "." + modname
        mod = self.src.module(full)
        if mod is None and full in self.src.parse_errors:
            raise Stop(self.src.parse_errors[full], where)
        if mod is None:
            raise Stop("registry names module %s, which is not in this vLLM" % modname, where)
        r = self.src.resolve_name(mod, clsname)
        if isinstance(r, tuple) and r[0] == "value":
            r2 = self.src.resolve_expr_class(r[1], r[2])
            if isinstance(r2, tuple) and r2[0] == "adapter":
                return r2[2]
            r = r2
        if not isinstance(r, ClassRef):
            raise Stop("registry class %s.%s is not a class it can read" % (modname, clsname), where)
        return r

    def _param_value(self, cls, fn, name):
        """A constructor parameter (`transformer_type: type[X] = X`): the value a more derived
        class passes up through `super().__init__(name=...)`, else the default. Registry classes
        are built with keyword config only, so nothing else can pass it. (expr, fn, module)."""
        if fn is None or fn.name != "__init__":
            return None
        args = fn.args
        params = list(args.args) + list(args.kwonlyargs)
        if not any(a.arg == name for a in params):
            return None
        mro = self.src.mro(cls)
        owner = next((c for c in mro if fn in c.node.body), None)
        if owner is None:
            return None
        for c in reversed(mro[:mro.index(owner)]):
            init = next((st for st in c.node.body if isinstance(st, ast.FunctionDef) and st.name == "__init__"), None)
            if init is None:
                continue
            for node in ast.walk(init):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__"
                        and isinstance(node.func.value, ast.Call) and expr_text(node.func.value.func) == "super"):
                    for kw in node.keywords:
                        if kw.arg == name:
                            return kw.value, init, c.module
            break  # the nearest derived __init__ does not pass it: the default applies
        positional = args.args[len(args.args) - len(args.defaults):] if args.defaults else []
        for a, d in list(zip(positional, args.defaults)) + list(zip(args.kwonlyargs, args.kw_defaults)):  # noqa: B905
            if a.arg == name and d is not None:
                return d, fn, owner.module
        return None

    @staticmethod
    def _local_value(fn, name, before):
        """The value last assigned to a local name in `fn` before `before` (same function)."""
        if fn is None:
            return None
        best = None
        line = getattr(before, "lineno", 1 << 30)
        for node in ast.walk(fn):
            if (isinstance(node, ast.Assign) and node.lineno < line
                    and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                    and (best is None or node.lineno > best.lineno)):
                best = node
        return best.value if best is not None else None

    # -- the walk ------------------------------------------------------------------------------
    def walk(self, cls):
        hops = []
        seen = set()
        current = cls
        for _ in range(MAX_DEPTH):
            if current.key in seen:
                raise Stop("cycle at %s" % current.name, current.where())
            seen.add(current.key)
            ok, how = self.src.eagle3(current)
            hop = {"class": current.name, "module": current.module.name, "file": current.where(),
                   "supports_eagle3": ok, "eagle3_evidence": how,
                   # 0.18+: the class holding the layers records aux states through this mixin
                   "eagle_model_mixin": self.src.inherits(current, "EagleModelMixin")}
            hops.append(hop)
            assigns = self.assignments(current)
            owner = self.layers_attr(assigns)
            if owner is not None:
                hop["layers_attr"] = owner[1]
                hop["layers_built_by"] = owner[3]
                hop["layers_file"] = owner[2]
                return hops
            candidates = [a for a, vals in assigns.items()
                          if any(isinstance(v, ast.Call) and expr_text(v.func).endswith("init_vllm_registered_model")
                                 for v, _, _, _ in vals)]
            candidates += [a for a in (*TEXT_ATTRS, "layers") if a in assigns and a not in candidates]
            if not candidates:
                raise _Partial(hops, Stop(
                    "%s builds no decoder layers and no text model under %s" % (current.name, "/".join(TEXT_ATTRS)),
                    current.where()))
            nxt, stop = None, None
            for attr in candidates:
                for value, c, fn, stmt in assigns[attr]:
                    try:
                        classes = self.value_classes(value, current, fn, c.module)
                    except Stop as exc:
                        stop = stop or exc
                        continue
                    if not classes:
                        stop = stop or Stop("self.%s is built from an empty architecture list" % attr,
                                            c.module.where(stmt))
                        continue
                    hop["attr"] = attr
                    hop["attr_file"] = c.module.where(stmt)
                    if len(classes) > 1:
                        hop["alternatives"] = [k.name for k in classes]
                    nxt = classes[0]
                    break
                if nxt is not None or stop is not None:
                    # the most likely text model could not be followed: say where, rather than
                    # walking into a less likely attribute (a vision encoder has layers too)
                    break
            if nxt is None:
                raise _Partial(hops, stop or Stop("no text model candidate resolves", current.where()))
            current = nxt
        raise _Partial(hops, Stop("more than %d hops" % MAX_DEPTH, current.where()))

    def default_aux_layers(self, top, hops, num_layers):
        """The aux layer ids vLLM picks by default, read from the getter the installed vLLM's
        SupportsEagle3 declares, evaluated for `num_layers`."""
        iface = self.src.module(MODELS_PKG + ".interfaces")
        getter = None
        if iface is not None and "SupportsEagle3" in iface.classes:
            for stmt in iface.classes["SupportsEagle3"].body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name.startswith("get_eagle3"):
                    getter = stmt.name
        if getter is None:
            return None, "no EAGLE-3 getter declared in interfaces.SupportsEagle3"
        if not hops or not hops[0]["supports_eagle3"]:
            return None, "%s does not implement SupportsEagle3 in vLLM %s" % (top.name, self.src.version)
        if num_layers is None:
            return None, "layer count unknown (no HF config)"
        cls = top
        for _ in range(MAX_DEPTH):
            owner, fn = self.src.method(cls, getter)
            if fn is None:
                return None, "%s has no %s" % (cls.name, getter)
            res = eval_layer_tuple(fn, num_layers)
            if res is not None:
                return list(res), "%s.%s (%s)" % (owner.name, getter, owner.module.where(fn))
            # delegation: return self.<attr>.<getter>()
            nxt = None
            for node in ast.walk(fn):
                if (isinstance(node, ast.Return) and isinstance(node.value, ast.Call)
                        and isinstance(node.value.func, ast.Attribute)
                        and isinstance(node.value.func.value, ast.Attribute)):
                    attr = node.value.func.value.attr
                    for h in hops:
                        if h["class"] == cls.name and h.get("attr") == attr:
                            nxt = h
            if nxt is None:
                return None, "cannot evaluate %s.%s (%s)" % (owner.name, getter, owner.module.where(fn))
            idx = hops.index(nxt)
            if idx + 1 >= len(hops):
                return None, "delegation past the last hop"
            nh = hops[idx + 1]
            cls = self.src.resolve_name(self.src.module(nh["module"]), nh["class"])
        return None, "delegation too deep"

    def capture_convention(self, owner):
        """Does the layers owner record the state entering layer L or leaving it under id L?"""
        _, fwd = self.src.method(owner, "forward")
        if fwd is None:
            return None
        for loop in ast.walk(fwd):
            if not isinstance(loop, ast.For):
                continue
            if "layers" not in ast.dump(loop.iter):
                continue
            layer_at, aux_at, plus_one = None, None, False
            for i, stmt in enumerate(loop.body):
                dump = ast.dump(stmt)
                if (layer_at is None and isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                        and expr_text(stmt.value.func) == "layer"):
                    layer_at = i
                if aux_at is None and ("aux_hidden_state" in dump or "_maybe_add_hidden_state" in dump):
                    aux_at = i
                    plus_one = "op=Add()" in dump and "Constant(value=1" in dump
            if layer_at is None or aux_at is None:
                continue
            where = owner.module.where(loop.body[aux_at])
            if aux_at < layer_at or plus_one:
                return {"id_means": "input_of_layer", "evidence": where}
            return {"id_means": "output_of_layer", "evidence": where}
        return None


class _Partial(Exception):
    def __init__(self, hops, stop):
        Exception.__init__(self, stop.reason)
        self.hops = hops
        self.stop = stop


def eval_layer_tuple(fn, n):
    """Evaluate `return (2, num_layers // 2, num_layers - 3)` with num_layers = n. None if the
    returned expression uses anything but constants, + - * // and one layer-count name."""
    counts = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and expr_text(node.value.func) == "len":
            counts.update(t.id for t in node.targets if isinstance(t, ast.Name))

    def ev(e):
        if isinstance(e, ast.Constant) and isinstance(e.value, int):
            return e.value
        if isinstance(e, ast.Name) and e.id in counts:
            return n
        if isinstance(e, ast.BinOp):
            a, b = ev(e.left), ev(e.right)
            if isinstance(e.op, ast.Add):
                return a + b
            if isinstance(e.op, ast.Sub):
                return a - b
            if isinstance(e.op, ast.Mult):
                return a * b
            if isinstance(e.op, ast.FloorDiv):
                return a // b
        raise ValueError(ast.dump(e))

    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, (ast.Tuple, ast.List)):
            try:
                return tuple(ev(e) for e in node.value.elts)
            except (ValueError, ZeroDivisionError):
                return None
    return None


def layer_count(hf):
    for cfg, prefix in ((hf.get("text_config"), "text_config."), (hf, "")):
        if not isinstance(cfg, dict):
            continue
        for key in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
            if isinstance(cfg.get(key), int):
                return cfg[key], prefix + key
    return None, None


def eagle3_config_gate(src, model_type):
    """vLLM <= 0.16 refuses eagle3 in config/speculative.py unless the text model_type contains
    one of a listed set of names. None if this vLLM has no such list."""
    mod = src.module("vllm.config.speculative")
    if mod is None:
        return None
    if "_memo_gate" not in src.__dict__:
        src._memo_gate = [n for n in ast.walk(mod.tree) if isinstance(n, ast.Assign)]
    for node in src._memo_gate:
        if isinstance(node.value, (ast.List, ast.Tuple)) and any(
                isinstance(t, ast.Name) and t.id == "eagle3_target_supported" for t in node.targets):
            listed = [const_str(e) for e in node.value.elts if const_str(e)]
            gate = {"present": True, "file": mod.where(node), "model_types": listed}
            if model_type:
                gate["model_type"] = model_type
                gate["allows"] = any(m in model_type for m in listed)
            return gate
    return {"present": False, "file": mod.rel, "model_types": None, "allows": True}


def scheduler_check(src):
    """Does the installed SchedulerConfig require `is_encoder_decoder` (an InitVar without a
    default, vLLM >= 0.16)? Callers that build it by hand (speculators 0.3.x) then fail."""
    mod = src.module("vllm.config.scheduler")
    if mod is None or "SchedulerConfig" not in mod.classes:
        return {"known": False, "reason": "no vllm/config/scheduler.py SchedulerConfig"}
    for stmt in mod.classes["SchedulerConfig"].body:
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and stmt.target.id == "is_encoder_decoder"):
            return {"known": True, "field": True, "required": stmt.value is None,
                    "init_var": "InitVar" in expr_text(stmt.annotation), "file": mod.where(stmt)}
    return {"known": True, "field": False, "required": False, "file": mod.where(mod.classes["SchedulerConfig"])}


def describe(src, arch, hf=None):
    """Never raises: a bug or a surprise in vLLM's source becomes a result saying so, so one odd
    architecture cannot take down a sweep."""
    try:
        return _describe(src, arch, hf)
    except Exception as exc:  # reported in the result, not swallowed
        tb = traceback.extract_tb(sys.exc_info()[2])[-1]
        return {"architecture": arch, "vllm_version": src.version, "vllm_root": src.root, "status": "unresolved",
                "reason": "probe error: %s: %s" % (type(exc).__name__, exc),
                "stopped_at": "model_probe.py:%d" % tb.lineno}


def _describe(src, arch, hf=None):
    hf = hf or {}
    res = {"architecture": arch, "vllm_version": src.version, "vllm_root": src.root}
    n, n_key = layer_count(hf)
    res["num_layers"] = n
    res["num_layers_from"] = n_key
    text = hf.get("text_config") if isinstance(hf.get("text_config"), dict) else hf
    model_type = (text or {}).get("model_type") or hf.get("model_type")
    res["model_type"] = hf.get("model_type")
    res["text_model_type"] = model_type
    # auto_map in config.json: transformers loads this model's config/tokenizer code from the
    # checkpoint, which only happens with trust_remote_code=True.
    auto_map = hf.get("auto_map")
    res["hf_auto_map"] = sorted(auto_map) if isinstance(auto_map, dict) else None
    res["vllm_checks"] = {"scheduler_is_encoder_decoder": scheduler_check(src)}
    try:
        reg = src.registry()
    except Stop as exc:
        res.update(status="unresolved", reason=exc.reason, stopped_at=exc.where)
        return res
    if arch not in reg:
        res.update(status="unresolved", reason="%s is not in this vLLM's model registry" % arch,
                   stopped_at=MODELS_PKG.replace(".", "/") + "/registry.py")
        return res
    res["registry"] = {"module": reg[arch][0], "class": reg[arch][1], "file": reg[arch][2]}
    resolver = Resolver(src, hf)
    try:
        top = resolver.class_of(arch)
        hops = resolver.walk(top)
    except _Partial as part:
        res.update(hops=part.hops, status=part.stop.status, reason=part.stop.reason, stopped_at=part.stop.where)
        if part.hops:
            res["supports_eagle3"] = part.hops[0]["supports_eagle3"]
        return res
    except Stop as exc:
        res.update(status=exc.status, reason=exc.reason, stopped_at=exc.where)
        return res
    except (SyntaxError, OSError) as exc:
        res.update(status="unresolved", reason="cannot read vLLM source: %s" % exc, stopped_at=None)
        return res
    res["hops"] = hops
    res["status"] = "resolved"
    attrs = [h["attr"] for h in hops[:-1]] + [hops[-1]["layers_attr"]]
    res["layers_path"] = ".".join(attrs)
    res["has_model_attr"] = len(hops) > 1 and hops[0].get("attr") == "model"
    res["supports_eagle3"] = hops[0]["supports_eagle3"]
    aux, why = resolver.default_aux_layers(top, hops, n)
    res["default_aux_layers"] = aux
    res["default_aux_layers_from"] = why
    last = hops[-1]
    owner = resolver.src.resolve_name(src.module(last["module"]), last["class"])
    conv = resolver.capture_convention(owner) if isinstance(owner, ClassRef) else None
    if isinstance(owner, ClassRef):
        # what a replacement forward on the layers owner can call to embed tokens
        res["layers_owner_methods"] = dict(
            (name, src.method(owner, name)[1] is not None)
            for name in ("get_input_embeddings", "embed_input_ids", "forward"))
    if conv is None:
        llama = src.module(MODELS_PKG + ".llama")
        if llama is not None and "LlamaModel" in llama.classes:
            conv = resolver.capture_convention(ClassRef(llama, llama.classes["LlamaModel"]))
            if conv is not None:
                conv["reference"] = "LlamaModel (the layers owner records no aux states itself)"
    res["aux_capture"] = conv
    res["eagle3_config_gate"] = eagle3_config_gate(src, model_type)
    return res


def source_report(src, family):
    """The generic diagnostic: model files for a family, the classes they define, and where
    `self.model`, `self.language_model` and `.layers` appear."""
    models_dir = os.path.join(src.root, "model_executor", "models")
    files = []
    fam = family.lower()
    for name in sorted(os.listdir(models_dir)) if os.path.isdir(models_dir) else []:
        if not name.endswith(".py") or fam not in name.lower():
            continue
        mod = src.module(MODELS_PKG + "." + name[:-3])
        if mod is None:
            continue
        classes = [{"name": c.name, "line": c.lineno, "bases": [expr_text(b) for b in c.bases]}
                   for c in mod.tree.body if isinstance(c, ast.ClassDef)]
        hits = []
        with open(mod.path, "r", encoding="utf-8", errors="replace") as fh:
            for i, line in enumerate(fh, 1):
                s = line.strip()
                if "self.model" in s or "self.language_model" in s or ".layers" in s:
                    hits.append({"line": i, "text": s[:200]})
        files.append({"file": mod.rel, "classes": classes, "mentions": hits[:200]})
    reg = {}
    try:
        reg = src.registry()
    except Stop:
        pass
    archs = sorted(a for a, v in reg.items() if fam in v[0].lower() or fam in a.lower())
    return {"family": family, "vllm_version": src.version, "vllm_root": src.root, "files": files,
            "architectures": archs}


def find_vllm_root():
    spec = importlib.util.find_spec("vllm")  # finds the package without executing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


def load_hf(path):
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path, "r", encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError("%s is not a JSON object" % path)
    return data


def emit(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="HF model directory or config.json")
    ap.add_argument("--arch", help="architecture name (instead of, or to override, --model)")
    ap.add_argument("--all", action="store_true", help="every registered architecture")
    ap.add_argument("--family", help="generic source diagnostic for model files matching this name")
    ap.add_argument("--vllm-root", help="the vllm package directory (default: the installed one)")
    ap.add_argument("--deadline", type=int, default=0,
                    help="seconds after which the probe ends itself (the console stopped waiting)")
    args = ap.parse_args(argv)
    if args.deadline > 0 and hasattr(signal, "alarm"):
        signal.alarm(args.deadline)  # SIGALRM's default action ends the process
    probe = "source" if args.family else "model"
    root = args.vllm_root or find_vllm_root()
    if not root or not os.path.isdir(root):
        emit({"kind": "error", "probe": probe,
              "message": "vLLM is not installed for %s (no vllm package found)" % sys.executable})
        return 1
    src = Source(root)
    if args.family:
        emit({"kind": "result", "probe": "source", "result": source_report(src, args.family)})
        return 0
    hf = {}
    if args.model:
        try:
            hf = load_hf(args.model)
        except (OSError, ValueError) as exc:
            emit({"kind": "error", "probe": probe, "message": "cannot read HF config: %s" % exc})
            return 1
    if args.all:
        for arch in sorted(src.registry()):
            emit({"kind": "result", "probe": "model", "result": describe(src, arch)})
        return 0
    archs = [args.arch] if args.arch else list(hf.get("architectures") or [])
    if not archs:
        emit({"kind": "error", "probe": probe,
              "message": "no architecture: give --arch, or --model with `architectures` in config.json"})
        return 1
    for arch in archs:
        emit({"kind": "result", "probe": "model", "result": describe(src, arch, hf)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
