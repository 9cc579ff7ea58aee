"""Config reading: the HF config.json as vLLM's model code reads it — which config keys an
expression names, their values, the conditions on them, the layer count, the keys vLLM renames
on load, and the answer config.json alone gives where vLLM cannot be read (model_probe.py's
sibling; stdlib only, Python >= 3.8).
"""

import ast
import json
import operator
import os

from .model_ast import const_str, expr_text, literal, local_value, self_attr_targets

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
        local = local_value(fn, node.id, None)
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


# A comparison of a config value with a literal: `is` reads as `==` (the literal is None, a
# bool or a string, which config.json gives as equal values, not the same objects).
_COMPARE = {ast.Eq: operator.eq, ast.Is: operator.eq, ast.NotEq: operator.ne,
            ast.IsNot: operator.ne, ast.In: lambda a, b: a in b,
            ast.NotIn: lambda a, b: a not in b}


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
        compare = _COMPARE.get(type(test.ops[0]))
        try:
            if compare is not None:
                return compare(left, right), None
        except TypeError:
            return None, path_text(path)
    return None, expr_text(test)


def layer_count(hf):
    text = hf.get("text_config")
    found = _layers_in(text, "text_config.") if isinstance(text, dict) else (None, None)
    return found if found[0] is not None else _layers_in(hf, "")


def _layers_in(cfg, prefix):
    """(count, the key that holds it) of one config dict, not looking into its sub-configs."""
    for key in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
        if isinstance(cfg.get(key), int):
            return cfg[key], prefix + key
    return None, None


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
        entry["num_layers"], entry["num_layers_from"] = _layers_in(sub, prefix + key + ".")
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


def load_hf(path):
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path, "r", encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError("%s is not a JSON object" % path)
    return data
