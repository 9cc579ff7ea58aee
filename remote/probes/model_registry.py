"""The registry phase: the installed vLLM package read from disk, one module at a time, its
model registry (architecture -> module, class), the config keys it renames on load, and
transformers' AutoModel tables for vLLM's Transformers backend (model_probe.py's sibling; stdlib
only, Python >= 3.8).
"""

import ast
import os
import platform

from . import find_package
from .model_ast import ClassRef, Module, const_str
from .model_classes import ClassIndex
from .probe_errors import Stop

MODELS_PKG = "vllm.model_executor.models"


class Source(ClassIndex):
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


def read_version(root):
    for name in ("_version.py", "version.py"):
        found = find_package.read_assignments(os.path.join(root, name))
        version = found.get("__version__", found.get("version"))
        if isinstance(version, str):
            return version
    return find_package.dist_version("vllm")
