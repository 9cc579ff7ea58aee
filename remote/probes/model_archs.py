"""Which architecture a wrapper builds through init_vllm_registered_model: named in the call,
forced by the code before it under conditions on the config, or read from config.json at
runtime — and the registry entry to the class (model_probe.py's sibling; stdlib only, Python
>= 3.8).
"""

import ast

from .model_ast import ClassRef, const_str, expr_text, guarded_statements, local_value
from .model_config import config_lookup, config_path, eval_condition, path_text
from .model_registry import MODELS_PKG
from .probe_errors import Stop


class ArchitectureChoice(object):
    """The resolver's state (the source, the HF config as the current hop reads it) and the
    architecture choice; model_values.ValueResolver follows expressions on top of it."""

    def __init__(self, source, hf_config=None):
        self.src = source
        self.hf = hf_config or {}
        self.given = bool(hf_config)  # a config.json was given: never answer "give --model"
        self.next_hf = None  # the config the next hop reads (a wrapper's text_config)

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
            if isinstance(archs, ast.Name):  # not forced (_forced said None above)
                local = local_value(fn, archs.id, call)
                if local is not None:
                    read_from = (config_path(local, fn), archs.id)
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
            r = self.src.resolve_expr_class(r[1], r[2])
        if not isinstance(r, ClassRef):
            raise Stop("registry class %s.%s is not a class it can read" % (modname, clsname), where)
        return r

