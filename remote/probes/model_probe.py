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

    def __init__(self, reason, where=None, status="unresolved", key=None):
        Exception.__init__(self, reason)
        self.reason = reason
        self.where = where
        self.status = status  # "unresolved" | "needs_config"
        self.key = key  # the config.json key that would settle a needs_config stop


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
            elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
                self.assigns[node.target.id] = node.value  # `_X: dict[str, str] = {...}`
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

    def __init__(self, root, transformers_root=None):
        self.root = os.path.abspath(root)  # the `vllm` package directory
        self.top = os.path.dirname(self.root)
        # where each readable top-level package lives; transformers only to follow
        # AutoModel.from_config (vLLM's Transformers backend) into the HF model classes
        self.tops = {"vllm": self.top}
        self.transformers_root = os.path.abspath(transformers_root) if transformers_root else None
        if self.transformers_root:
            self.tops["transformers"] = os.path.dirname(self.transformers_root)
        self._modules = {}
        self.parse_errors = {}
        self.version = read_version(self.root)

    def module(self, name):
        if name in self._modules:
            return self._modules[name]
        mod = None
        top = self.tops.get(name.split(".")[0])
        if top is not None:
            rel = name.replace(".", os.sep)
            for cand, is_pkg in ((rel + ".py", False), (os.path.join(rel, "__init__.py"), True)):
                path = os.path.join(top, cand)
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

    # -- the config keys vLLM renames when it loads a checkpoint's config -------------------
    def config_remap(self):
        """`_CONFIG_ATTRS_MAPPING` in vllm/transformers_utils/config.py (e.g. InternVL's
        `llm_config` is read as `text_config`): (mapping, where it was read, or why not)."""
        if "_remap" in self.__dict__:
            return self._remap
        mod = self.module("vllm.transformers_utils.config")
        out = ({}, "no vllm/transformers_utils/config.py")
        if mod is not None:
            node = mod.assigns.get("_CONFIG_ATTRS_MAPPING")
            out = ({}, "vllm/transformers_utils/config.py has no _CONFIG_ATTRS_MAPPING")
            if isinstance(node, ast.Dict):
                pairs = [(const_str(k), const_str(v)) for k, v in zip(node.keys, node.values)]  # noqa: B905
                where = next((mod.where(n) for n in mod.tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                              and "_CONFIG_ATTRS_MAPPING" in ast.dump(n.targets[0] if isinstance(n, ast.Assign)
                                                                       else n.target)), mod.rel)
                out = (dict((k, v) for k, v in pairs if k and v), where)
        self._remap = out
        return out

    # -- transformers' AutoModel mapping (for vLLM's Transformers backend) -------------------
    def with_hf_config_maps_model_type(self):
        """vLLM >= ~0.2x: VllmConfig.with_hf_config gives a sub-config without `architectures`
        the one transformers' MODEL_FOR_CAUSAL_LM_MAPPING_NAMES names for its model_type."""
        mod = self.module("vllm.config.vllm")
        cls = mod.classes.get("VllmConfig") if mod is not None else None
        for stmt in cls.body if cls is not None else []:
            if (isinstance(stmt, ast.FunctionDef) and stmt.name == "with_hf_config"
                    and "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES" in ast.dump(stmt)):
                return mod.where(stmt)
        return None

    def hf_mapping(self, mapping):
        """model_type -> class name from transformers' modeling_auto table, or a reason (str)."""
        if self.transformers_root is None:
            return "transformers is not installed where the probe looks (give --transformers-root)"
        auto = self.module("transformers.models.auto.modeling_auto")
        if auto is None:
            return "no transformers/models/auto/modeling_auto.py under " + self.transformers_root
        node = auto.assigns.get(mapping)
        table = {}
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], (ast.List, ast.Tuple)):
            for elt in node.args[0].elts:
                if isinstance(elt, ast.Tuple) and len(elt.elts) == 2 and const_str(elt.elts[0]):
                    v = elt.elts[1]
                    if isinstance(v, ast.Tuple) and v.elts:
                        v = v.elts[0]
                    if const_str(v):
                        table[const_str(elt.elts[0])] = const_str(v)
        return table

    def hf_model_class(self, mapping, model_type):
        """The transformers class AutoModel (mapping MODEL_MAPPING_NAMES) or AutoModelForCausalLM
        (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) builds for `model_type`: ClassRef, or a reason."""
        table = self.hf_mapping(mapping)
        if not isinstance(table, dict):
            return table
        name = table.get(model_type)
        if name is None:
            return "model_type %r is not in transformers' %s" % (model_type, mapping)
        pkg = model_type.replace("-", "_")
        cands = ["transformers.models.%s.modeling_%s" % (pkg, pkg)]
        models_dir = os.path.join(self.transformers_root, "models")
        for d in sorted(os.listdir(models_dir)) if os.path.isdir(models_dir) else []:
            f = os.path.join(models_dir, d, "modeling_%s.py" % d)
            if d != pkg and os.path.isfile(f):
                cands.append("transformers.models.%s.modeling_%s" % (d, d))
        for modname in cands:
            if modname != cands[0]:  # cheap text test before parsing another model file
                path = os.path.join(self.tops["transformers"], modname.replace(".", os.sep) + ".py")
                with open(path, "r", encoding="utf-8", errors="replace") as fh:
                    if ("class %s(" % name) not in fh.read():
                        continue
            mod = self.module(modname)
            if mod is not None and name in mod.classes:
                return ClassRef(mod, mod.classes[name])
        return "transformers class %s (model_type %r) not found under %s" % (name, model_type, models_dir)

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


# -- reading the HF config the way vLLM's model code does -------------------------------------
CONFIG_ROOT_TEXTS = ("config", "hf_config", "self.config", "self.hf_config")
TEXT = "<text>"  # get_text_config(): text_config when there is one, else the config itself


def config_path(node, fn=None, depth=0):
    """The config keys an expression reads (`config.text_config` -> ["text_config"]), [] for the
    HF config itself, None when it is not a config expression."""
    if node is None or depth > 8:
        return None
    text = expr_text(node)
    if text in CONFIG_ROOT_TEXTS or text.endswith(".hf_config") or text.endswith(".hf_text_config"):
        return [TEXT] if text.endswith(".hf_text_config") else []
    if isinstance(node, ast.Name) and fn is not None:
        local = Resolver._local_value(fn, node.id, None)
        return config_path(local, fn, depth + 1) if local is not None else None
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
            and fn is not None):  # self.text_config = config.text_config, earlier in the same method
        for stmt in ast.walk(fn):
            for attr, value, _ in self_attr_targets(stmt):
                if attr == node.attr:
                    return config_path(value, fn, depth + 1)
    if isinstance(node, ast.Attribute):
        inner = config_path(node.value, fn, depth + 1)
        return [*inner, node.attr] if inner is not None else None
    if isinstance(node, ast.Call):
        fname = expr_text(node.func)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get_text_config":
            inner = config_path(node.func.value, fn, depth + 1)
            return [*inner, TEXT] if inner is not None else None
        if fname == "getattr" and len(node.args) >= 2 and const_str(node.args[1]):
            inner = config_path(node.args[0], fn, depth + 1)
            return [*inner, const_str(node.args[1])] if inner is not None else None
    return None


def path_text(path):
    return ".".join("text_config" if p == TEXT else p for p in path) or "config"


def config_lookup(hf, path):
    """(found, value) for a key path in the config dict; a missing key reads as absent."""
    cur = hf
    for part in path:
        if part == TEXT:
            cur = cur.get("text_config") if isinstance(cur.get("text_config"), dict) else cur
            continue
        if not isinstance(cur, dict) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


def literal(node):
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return False, None


def eval_condition(test, fn, hf):
    """(True/False, None) for a condition on the HF config, or (None, key) when it cannot be
    decided: no config given, or an expression that is not a comparison of config keys."""
    if isinstance(test, ast.BoolOp):
        results = [eval_condition(v, fn, hf) for v in test.values]
        for got, key in results:
            if got is None:
                return None, key
        vals = [got for got, _ in results]
        return (all(vals) if isinstance(test.op, ast.And) else any(vals)), None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        got, key = eval_condition(test.operand, fn, hf)
        return (None if got is None else not got), key
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        path = config_path(test.left, fn)
        ok, right = literal(test.comparators[0])
        if path is None or not ok:
            return None, expr_text(test)
        if hf is None:
            return None, path_text(path)
        found, left = config_lookup(hf, path)
        left = left if found else None
        op = test.ops[0]
        try:
            if isinstance(op, (ast.Eq, ast.Is)):
                return left == right, None
            if isinstance(op, (ast.NotEq, ast.IsNot)):
                return left != right, None
            if isinstance(op, ast.In):
                return left in right, None
            if isinstance(op, ast.NotIn):
                return left not in right, None
        except TypeError:
            return None, path_text(path)
    return None, expr_text(test)


def guarded_statements(body, guards):
    """Every statement of a function body with the `if` tests that guard it: [(test, taken)]."""
    for stmt in body:
        yield stmt, guards
        if isinstance(stmt, ast.If):
            for inner in guarded_statements(stmt.body, [*guards, (stmt.test, True)]):
                yield inner
            for inner in guarded_statements(stmt.orelse, [*guards, (stmt.test, False)]):
                yield inner
        elif isinstance(stmt, (ast.With, ast.Try)):
            for field in ("body", "orelse", "finalbody"):
                for inner in guarded_statements(getattr(stmt, field, []) or [], guards):
                    yield inner


class Resolver(object):
    def __init__(self, source, hf_config=None):
        self.src = source
        self.hf = hf_config or {}
        self.given = bool(hf_config)  # a config.json was given: never answer "give --model"
        self.next_hf = None  # the config the next hop reads (a wrapper's text_config)

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
                    elif fname.endswith("ModuleList") and attr.endswith("_layers"):
                        found.append((2, attr, c.module.where(stmt), "nn.ModuleList"))
                    elif fname.endswith("ModuleDict") and (attr in LAYER_ATTRS or attr.endswith("_layers")):
                        # MTP drafts: {str(idx): Layer(...) for idx in range(...)}, keyed by layer id
                        found.append((2, attr, c.module.where(stmt), "nn.ModuleDict"))
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
            return self.registered(value, mod_of, fn)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            c, meth = self.src.method(cls, func.attr)
            if meth is not None:
                return self.returns(meth, cls, depth, c.module)
            c, v = self.src.class_attr(cls, func.attr)
            if v is not None:
                return self.value_classes(v, cls, None, c.module, depth + 1)
            raise Stop("self.%s is neither a method nor a class attribute of %s" % (func.attr, cls.name), where)
        passed_class = self._class_argument(value, cls, fn, mod_of, depth)
        if passed_class is not None:
            return passed_class
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
        if isinstance(func, ast.Attribute) and func.attr in ("from_config", "_from_config"):
            return self.from_config(value, cls, fn, mod_of, depth)
        if isinstance(func, ast.Attribute):
            raise Stop("built at runtime by %s(...), outside vLLM's model classes" % fname, where)
        raise Stop("cannot follow call " + fname, where)

    AUTO_MAPPINGS = {"AutoModel": "MODEL_MAPPING_NAMES", "AutoModelForCausalLM": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"}

    def from_config(self, call, cls, fn, mod_of, depth):
        """`AutoModel.from_config(config=...)` (vLLM's Transformers backend) or
        `SomeClass.from_config(...)`: the class transformers builds for the config's model_type."""
        where = mod_of.where(call)
        owner = expr_text(call.func.value)
        if owner not in self.AUTO_MAPPINGS:
            found = self.src.resolve_expr_class(mod_of, call.func.value)
            if isinstance(found, ClassRef):
                return [found]
            raise Stop("built at runtime by %s(...), outside the classes the probe can read"
                       % expr_text(call.func), where)
        cfg = None
        for kw in call.keywords:
            if kw.arg == "config":
                cfg = kw.value
            elif kw.arg is None:  # **self._from_config_kwargs -> dict(config=...)
                splat = kw.value
                if isinstance(splat, ast.Name):  # kwargs = self._from_config_kwargs; f(**kwargs)
                    splat = self._local_value(fn, splat.id, call) or splat
                cfg = cfg or self._dict_entry(splat, cls, "config")
        if cfg is None and call.args:
            cfg = call.args[0]
        path = config_path(cfg, fn) if cfg is not None else None
        if path is None:
            raise Stop("%s.from_config builds from %s, which is not a config the probe can read"
                       % (owner, expr_text(cfg) if cfg is not None else "nothing it can name"), where)
        key = path_text([*path, "model_type"])
        if not self.given:
            raise Stop("%s.from_config builds the model transformers maps from the HF config's %s; "
                       "give --model to settle it" % (owner, key), where, "needs_config", key)
        found, model_type = config_lookup(self.hf, [*path, "model_type"])
        if not found or not isinstance(model_type, str):
            raise Stop("the model's config.json has no %s, which %s.from_config maps to a class"
                       % (key, owner), where, "needs_config", key)
        k = self.src.hf_model_class(self.AUTO_MAPPINGS[owner], model_type)
        if not isinstance(k, ClassRef):
            raise Stop("%s.from_config: %s" % (owner, k), where)
        sub = config_lookup(self.hf, path)[1]
        self.next_hf = sub if isinstance(sub, dict) else None
        return [k]

    def _dict_entry(self, node, cls, key):
        """`dict(key=...)`, `{key: ...}`, or `self._kwargs` (a property returning one): the entry."""
        if isinstance(node, ast.Call) and expr_text(node.func) == "dict":
            return next((kw.value for kw in node.keywords if kw.arg == key), None)
        if isinstance(node, ast.Dict):
            return next((v for k, v in zip(node.keys, node.values) if const_str(k) == key), None)  # noqa: B905
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"):
            return None
        _, meth = self.src.method(cls, node.attr)
        for ret in ast.walk(meth) if meth is not None else []:
            if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Call) and expr_text(ret.value.func) == "dict":
                for kw in ret.value.keywords:
                    if kw.arg == key:
                        return kw.value
            if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict):
                for k, v in zip(ret.value.keys, ret.value.values):  # noqa: B905
                    if const_str(k) == key:
                        return v
        return None

    CLASS_KEYWORDS = ("model_class", "model_cls", "cls", "module_class", "model_type", "klass")

    def _class_argument(self, call, cls, fn, mod_of, depth):
        """`initialize_model(..., model_class=Llama4ForCausalLM)`: a helper (read or not) that
        is handed the class it builds. The class in the call is the answer."""
        fname = expr_text(call.func).split(".")[-1]
        if fname in ("init_vllm_registered_model", "super") or not isinstance(call.func, (ast.Name, ast.Attribute)):
            return None
        for kw in call.keywords:
            if kw.arg in self.CLASS_KEYWORDS:
                try:
                    found = self.value_classes(kw.value, cls, fn, mod_of, depth + 1)
                except Stop:
                    continue
                if found:
                    return found
        return None

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

    def registered(self, call, mod, fn=None):
        """init_vllm_registered_model(...): the architecture is in the call, forced by the code
        before it (`config.text_config.architectures = [...]` / a local `architectures = [...]`
        under `if config.model_type == ...`), or read from the HF config at runtime."""
        kws = {k.arg: k.value for k in call.keywords if k.arg}
        archs = kws.get("architectures")
        hf = kws.get("hf_config")
        if hf is None and len(call.args) > 1:
            hf = call.args[1]
        vc = kws.get("vllm_config", call.args[0] if call.args else None)
        if (isinstance(vc, ast.Call) and isinstance(vc.func, ast.Attribute)
                and vc.func.attr == "with_hf_config"):  # vllm_config.with_hf_config(cfg, architectures=[...])
            vkw = {k.arg: k.value for k in vc.keywords if k.arg}
            if hf is None:
                hf = vkw.get("hf_config", vc.args[0] if vc.args else None)
            if archs is None:
                archs = vkw.get("architectures", vc.args[1] if len(vc.args) > 1 else None)
        where = mod.where(call)
        names = None
        if isinstance(archs, (ast.List, ast.Tuple)):
            names = [const_str(e) for e in archs.elts]
            if not all(names):
                names = None
        elif isinstance(archs, ast.Name):
            names = self._forced(fn, archs.id, call, mod)
        read_from = None  # (config key path, the expression's text) vLLM reads the names from
        if archs is not None and names is None and not (isinstance(archs, ast.Constant) and archs.value is None):
            if isinstance(archs, ast.Name):
                names = self._forced(fn, archs.id, call, mod)
                if names is None and self._local_value(fn, archs.id, call) is not None:
                    read_from = (config_path(self._local_value(fn, archs.id, call), fn), archs.id)
            else:
                read_from = (config_path(archs, fn), expr_text(archs))
            if read_from is not None and read_from[0] is None:
                raise Stop("architecture comes from %s at runtime, which the probe cannot evaluate"
                           % read_from[1], where, "unresolved")
        if names is None:
            if read_from is not None:
                path, forced_target = read_from[0][:-1], read_from[1]
            else:
                path = config_path(hf, fn) if hf is not None else []
                forced_target = expr_text(hf) + ".architectures" if hf is not None else None
            if path is None:
                raise Stop("architecture comes from %s at runtime, which is not a config key the probe can read"
                           % expr_text(hf), where, "unresolved")
            forced = self._forced(fn, forced_target, call, mod) if forced_target else None
            if forced is not None:
                names = forced
            else:
                key = path_text([*path, "architectures"])
                if not self.given:
                    raise Stop("architecture comes from the HF config at runtime (%s); give --model to settle it"
                               % key, where, "needs_config", key)
                found, value = config_lookup(self.hf, [*path, "architectures"])
                if not (found and isinstance(value, list) and value):
                    value = self._architecture_from_model_type(path, where)
                if not value:
                    raise Stop("the model's config.json has no %s, which vLLM reads here to pick the text model"
                               % key, where, "needs_config", key)
                names = [str(v) for v in value]
        reg = self.src.registry()
        out = []
        for n in names:
            if n not in reg:
                raise Stop("architecture %s is not in the registry" % n, where)
            out.append(self.class_of(n))
        # the inner model reads hf_config as its own config: follow it there
        hp = config_path(hf, fn) if hf is not None else None
        if hp and self.given:
            sub = config_lookup(self.hf, hp)[1]
            self.next_hf = sub if isinstance(sub, dict) else None
        return out

    def _architecture_from_model_type(self, path, where):
        """What VllmConfig.with_hf_config gives a sub-config that names no architectures."""
        maps = self.src.with_hf_config_maps_model_type() if path else None
        found, model_type = config_lookup(self.hf, [*path, "model_type"])
        if not maps or not found or not isinstance(model_type, str):
            return None
        table = self.src.hf_mapping("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")
        if not isinstance(table, dict):
            raise Stop("vLLM maps %s=%r to an architecture through transformers (%s), but %s"
                       % (path_text([*path, "model_type"]), model_type, maps, table), where)
        return [table[model_type]] if model_type in table else None

    def _forced(self, fn, target, call, mod):
        """The value the code assigns to `target` (a local name, or `<expr>.architectures`) before
        `call`, evaluated against the HF config: the last assignment whose guards hold wins.
        None when nothing is assigned (or only `None`). Stop when a guard needs the config."""
        if fn is None:
            return None
        line = getattr(call, "lineno", 1 << 30)
        chosen = None
        for stmt, guards in guarded_statements(fn.body, []):
            if stmt.lineno >= line or not isinstance(stmt, ast.Assign):
                continue
            if not any(expr_text(t) == target for t in stmt.targets):
                continue
            verdict, key = True, None
            for test, want in guards:
                got, k = eval_condition(test, fn, self.hf if self.given else None)
                if got is None:
                    verdict, key = None, k
                    break
                if got != want:
                    verdict = False
                    break
            if verdict is None:
                if not self.given:
                    raise Stop("architecture is forced in code under a condition on the HF config (%s); "
                               "give --model to settle it" % (key or expr_text(guards[0][0])),
                               mod.where(stmt), "needs_config", key)
                raise Stop("architecture is forced in code under a condition the probe cannot evaluate "
                           "against config.json (%s)" % (key or expr_text(guards[0][0])), mod.where(stmt))
            if verdict:
                value = stmt.value
                if isinstance(value, ast.Constant) and value.value is None:
                    chosen = None
                elif isinstance(value, (ast.List, ast.Tuple)) and all(const_str(e) for e in value.elts):
                    chosen = [const_str(e) for e in value.elts]
                else:
                    raise Stop("architecture is set in code from %s, which the probe cannot evaluate"
                               % expr_text(value), mod.where(stmt))
        return chosen

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
    def walk(self, cls, start=0):
        hops = []
        seen = set()
        current = cls
        for _ in range(start, MAX_DEPTH):
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
                # No attribute with a text-model name: a member under another name (`self.bert`,
                # `self.mtp_block`) whose class leads to decoder layers, first in source order.
                found = self._named_member(current, assigns, depth=len(hops))
                if found is None:
                    raise _Partial(hops, Stop(
                        "%s builds no decoder layers and no vLLM sub-model that leads to them"
                        % current.name, current.where()))
                attr, stmt_where, nxt = found
                hop["attr"] = attr
                hop["attr_file"] = stmt_where
                hop["attr_chosen_by"] = "the only vLLM sub-model that leads to decoder layers"
                current = nxt
                continue
            nxt, stop = None, None
            for attr in candidates:
                for value, c, fn, stmt in assigns[attr]:
                    self.next_hf = None
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
            if self.next_hf is not None:
                self.hf = self.next_hf
            current = nxt
        raise _Partial(hops, Stop("more than %d hops" % MAX_DEPTH, current.where()))

    def _named_member(self, cls, assigns, depth):
        """(attr, where, class) for the one attribute whose vLLM class reaches decoder layers."""
        if depth >= MAX_DEPTH:
            return None
        saved_hf, found = self.hf, []
        try:
            self._scan_members(cls, assigns, depth, found)
        finally:
            self.hf = saved_hf
        if len(found) != 1:
            return None  # none, or several (a vision tower has layers too): not guessed
        return found[0]

    def _scan_members(self, cls, assigns, depth, found):
        order = sorted(((vals[0][3].lineno, attr) for attr, vals in assigns.items()))
        for _, attr in order:
            for value, c, fn, stmt in assigns[attr]:
                if not isinstance(value, ast.Call):
                    continue
                try:
                    classes = self.value_classes(value, cls, fn, c.module)
                except Stop:
                    continue
                for k in classes[:1]:
                    if k.key == cls.key:
                        continue
                    try:
                        self.walk(k, depth + 1)
                    except (_Partial, Stop):
                        continue
                    found.append((attr, c.module.where(stmt), k))
                break

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


def remap_config(src, hf):
    """The config as vLLM's model code sees it: keys vLLM renames on load are renamed here too,
    so `llm_config` settles a wrapper that reads `text_config`. (config, renamed keys)."""
    mapping, where = src.config_remap()
    out, renamed = dict(hf), []
    for old, new in sorted(mapping.items()):
        if old in out and new not in out:
            out[new] = out.pop(old)
            renamed.append({"from": old, "to": new, "by": where})
    return out, renamed


def _describe(src, arch, hf=None):
    hf, renamed = remap_config(src, hf or {})
    res = {"architecture": arch, "vllm_version": src.version, "vllm_root": src.root}
    if renamed:
        res["config_renamed"] = renamed
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
        if part.stop.key:
            res["config_key"] = part.stop.key
        if part.hops:
            res["supports_eagle3"] = part.hops[0]["supports_eagle3"]
        return res
    except Stop as exc:
        res.update(status=exc.status, reason=exc.reason, stopped_at=exc.where)
        if exc.key:
            res["config_key"] = exc.key
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


def find_package_root(name):
    try:
        spec = importlib.util.find_spec(name)  # finds the package without executing it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


def find_vllm_root():
    return find_package_root("vllm")


def config_nesting(hf, prefix="", depth=0):
    """The sub-configs config.json nests (text_config, vision_config, llm_config, ...), each with
    the architectures and model_type it names: what a wrapper will build, as far as the config
    alone says."""
    out = []
    for key in sorted(hf):
        sub = hf[key]
        if not isinstance(sub, dict) or not key.endswith("_config") or depth > 3:
            continue
        entry = {"key": prefix + key, "model_type": sub.get("model_type"),
                 "architectures": sub.get("architectures") if isinstance(sub.get("architectures"), list) else None}
        n, n_key = None, None
        for k in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
            if isinstance(sub.get(k), int):
                n, n_key = sub[k], prefix + key + "." + k
                break
        entry["num_layers"], entry["num_layers_from"] = n, n_key
        out.append(entry)
        out.extend(config_nesting(sub, prefix + key + ".", depth + 1))
    return out


def config_only(hf, arch, why):
    """What config.json alone says, where vLLM cannot be read: the architecture, the layer
    count and the wrapper nesting. Marked config_only: no layers path, no SupportsEagle3."""
    n, n_key = layer_count(hf)
    nesting = config_nesting(hf)
    text = next((e for e in nesting if e["key"] in ("text_config", "llm_config", "language_config")), None)
    auto_map = hf.get("auto_map")
    inner = ""
    if text is not None:
        inner = "; it nests %s (%s, model_type %s)" % (
            text["key"], "/".join(text["architectures"] or []) or "no architectures", text["model_type"])
    return {"architecture": arch, "status": "config_only", "config_only": True, "vllm_version": None,
            "model_type": hf.get("model_type"), "num_layers": n, "num_layers_from": n_key,
            "config_nesting": nesting, "text_config_key": text["key"] if text else None,
            "hf_auto_map": sorted(auto_map) if isinstance(auto_map, dict) else None,
            "reason": "config-only answer (%s): no layers path or SupportsEagle3 without vLLM's source%s"
                      % (why, inner),
            "stopped_at": "config.json"}


def config_only_main(args, why):
    try:
        hf = load_hf(args.model)
    except (OSError, ValueError) as exc:
        emit({"kind": "error", "probe": "model", "message": "cannot read HF config: %s" % exc})
        return 1
    archs = [args.arch] if args.arch else list(hf.get("architectures") or [])
    if not archs:
        emit({"kind": "error", "probe": "model",
              "message": "no architecture: config.json has no `architectures` (give --arch)"})
        return 1
    for arch in archs:
        emit({"kind": "result", "probe": "model", "result": config_only(hf, arch, why)})
    return 0


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
    ap.add_argument("--transformers-root",
                    help="the transformers package directory, read for vLLM's Transformers backend "
                         "(default: the installed one)")
    ap.add_argument("--deadline", type=int, default=0,
                    help="seconds after which the probe ends itself (the console stopped waiting)")
    args = ap.parse_args(argv)
    if args.deadline > 0 and hasattr(signal, "alarm"):
        signal.alarm(args.deadline)  # SIGALRM's default action ends the process
    probe = "source" if args.family else "model"
    root = args.vllm_root or find_vllm_root()
    if not root or not os.path.isdir(root):
        why = "vLLM is not installed for %s (no vllm package found)" % sys.executable
        if probe == "model" and args.model and not args.all:
            return config_only_main(args, why)
        emit({"kind": "error", "probe": probe,
              "message": why + ("; give --model for a config-only answer" if probe == "model" else "")})
        return 1
    src = Source(root, args.transformers_root or find_package_root("transformers"))
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
