"""Class resolution of values: the classes an expression assigned to `self.<attr>` can build —
a class, a helper's return, a constructor parameter, a class handed to a helper, a
`from_config` through transformers' AutoModel tables (model_probe.py's sibling; stdlib only,
Python >= 3.8). Anything it cannot follow raises Stop with the file:line where it stopped.
"""

import ast
import contextlib

from .model_archs import ArchitectureChoice
from .model_ast import ClassRef, const_str, expr_text, local_value
from .model_config import config_lookup, config_path, path_text
from .probe_errors import Stop


class ValueResolver(ArchitectureChoice):
    """What an assigned expression builds; model_walk.Resolver walks the hops with it."""

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
                with contextlib.suppress(Stop):
                    out.extend(self.value_classes(branch, cls, fn, mod_of, depth + 1))
            if not out:
                raise Stop("neither branch of a conditional resolves: " + expr_text(value), where)
            return out
        if isinstance(value, ast.Name):
            bound = self._bound_name(value.id, value, cls, fn, mod_of, depth)
            if bound is not None:
                return bound
            r = self.src.resolve_expr_class(mod_of, value)
            if isinstance(r, ClassRef):
                return [r]
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
            bound = self._bound_name(func.id, value, cls, fn, mod_of, depth)
            if bound is not None:
                return bound
            r = self.src.resolve_name(mod_of, func.id)
            if isinstance(r, ClassRef):
                return [r]
            if isinstance(r, tuple) and r[0] == "function":
                return self.returns(r[2], cls, depth, r[1], helper=True)
            if isinstance(r, tuple) and r[0] == "value":
                inner = self.src.resolve_expr_class(r[1], r[2])
                if isinstance(inner, ClassRef):
                    return [inner]
            raise Stop("%s(...) is not a vLLM class or helper it can read (%s)"
                       % (func.id, r[1] if isinstance(r, tuple) else "unknown name"), where)
        if isinstance(func, ast.Attribute) and func.attr in ("from_config", "_from_config"):
            return self.from_config(value, cls, fn, mod_of, depth)
        if isinstance(func, ast.Attribute):
            raise Stop("built at runtime by %s(...), outside vLLM's model classes" % fname, where)
        raise Stop("cannot follow call " + fname, where)

    def _bound_name(self, name, before, cls, fn, mod_of, depth):
        """A name the function binds: a local assigned before `before`, or a constructor
        parameter (what a derived class passes, else its default). The classes its value
        builds, or None when the function binds no such name."""
        local = local_value(fn, name, before)
        if local is not None:
            return self.value_classes(local, cls, fn, mod_of, depth + 1)
        passed = self._param_value(cls, fn, name)
        if passed is not None:
            expr, pfn, pmod = passed
            return self.value_classes(expr, cls, pfn, pmod, depth + 1)
        return None

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
                    splat = local_value(fn, splat.id, call) or splat
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
            if isinstance(ret, ast.Return) and isinstance(ret.value, (ast.Call, ast.Dict)):
                found = self._dict_entry(ret.value, cls, key)
                if found is not None:
                    return found
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
