"""The layer-path walk: from the registered class, hop by hop through the attribute that holds
the text model, to the class that builds the decoder layers; then the default EAGLE-3 aux layer
ids and whether a layer id means the state entering or leaving that layer (model_probe.py's
sibling; stdlib only, Python >= 3.8).
"""

import ast
import operator

from .model_ast import expr_text, self_attr_targets
from .model_registry import MODELS_PKG
from .model_values import ValueResolver
from .probe_errors import Partial, Stop

# Attributes through which a wrapper holds its text model, in the order they are tried when the
# source does not say it explicitly (init_vllm_registered_model says it explicitly).
TEXT_ATTRS = ("model", "language_model", "text_model", "llm", "lm", "transformer", "decoder",
              "backbone", "text_decoder", "encoder")
LAYER_ATTRS = ("layers", "h", "blocks", "layer")
MAX_DEPTH = 8


class Resolver(ValueResolver):
    """Walks a registered class to its decoder layers (describe() in model_probe.py drives it)."""

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
            init = next((stmt for stmt in reversed(c.node.body)  # the last definition wins
                         if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__"), None)
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
                    raise Partial(hops, Stop(
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
                raise Partial(hops, stop or Stop("no text model candidate resolves", current.where()))
            if self.next_hf is not None:
                self.hf = self.next_hf
            current = nxt
        raise Partial(hops, Stop("more than %d hops" % MAX_DEPTH, current.where()))

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
                    except (Partial, Stop):
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
            # recorded: before the layer's call under its own id (ids 0..N-1), or after it under
            # idx + 1 (ids 1..N, and 0 before the loop: id N is the last layer's output)
            if aux_at < layer_at:
                return {"id_means": "input_of_layer", "evidence": where, "recorded": "before_call"}
            if plus_one:
                return {"id_means": "input_of_layer", "evidence": where, "recorded": "after_call"}
            return {"id_means": "output_of_layer", "evidence": where, "recorded": "after_call"}
        return None


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.FloorDiv: operator.floordiv}


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
        if isinstance(e, ast.BinOp) and type(e.op) in _ARITHMETIC:
            return _ARITHMETIC[type(e.op)](ev(e.left), ev(e.right))
        raise ValueError(ast.dump(e))

    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, (ast.Tuple, ast.List)):
            try:
                return tuple(ev(e) for e in node.value.elts)
            except (ValueError, ZeroDivisionError):
                return None
    return None
