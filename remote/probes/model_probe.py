"""Where does this model keep its decoder layers in the installed vLLM, and does it speak EAGLE-3?

Runs on the box with only the container's python (stdlib, Python >= 3.8). It never imports vLLM
(that needs GPUs and minutes): it reads vLLM's source with `ast`, follows the model registry to
the class, the class to its bases and to the attribute that builds its text model, and so on until
the class that owns the decoder layers. Anything it cannot follow is reported with the file and
line where it stopped, never guessed.

This file is the entry point (arguments, describe(), the report); the phases are its sibling
modules, uploaded beside it (remote/link/upload.py finds them from these imports): model_registry
(vLLM's package and model registry), model_classes and model_values (class resolution),
model_archs (the architecture a wrapper builds), model_walk (the layer-path walk), model_config
(reading config.json as vLLM does), model_ast (the shared source-reading vocabulary).

Output: JSON lines on stdout, `{"kind": "result", "probe": "model", "result": {...}}`.
  model_probe.py --model /path/to/hf_dir_or_config.json
  model_probe.py --arch LlamaForCausalLM [--vllm-root DIR]
  model_probe.py --all                 (one result per registered architecture)
  model_probe.py --family kimi         (the generic source diagnostic, probe "source")
"""

import argparse
import ast
import contextlib
import json
import os
import signal
import sys
import traceback

if not __package__:  # run as a script on the box: the siblings uploaded beside it are its package
    import types

    __package__ = "eagle3_probes"
    sys.modules[__package__] = types.ModuleType(__package__)
    sys.modules[__package__].__path__ = [os.path.dirname(os.path.abspath(__file__))]
from .find_package import package_dir as find_package_root
from .model_ast import ClassRef, const_str, expr_text
from .model_config import config_only, layer_count, load_hf, remap_config
from .model_registry import MODELS_PKG, Source
from .model_walk import LAYER_ATTRS, Resolver
from .probe_errors import Partial, Stop

# The phases live in sibling modules (the layer-path walk, class resolution, the registry, config
# reading); these are the names the console and its tests use from here.
__all__ = ["LAYER_ATTRS", "Source", "describe", "find_package_root", "main", "source_report"]


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
                "stopped_at": "%s:%d" % (os.path.basename(tb.filename), tb.lineno)}


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
    except (Partial, Stop) as exc:
        stop = exc.stop if isinstance(exc, Partial) else exc
        if isinstance(exc, Partial):  # the hops walked before it stopped
            res["hops"] = exc.hops
            if exc.hops:
                res["supports_eagle3"] = exc.hops[0]["supports_eagle3"]
        res.update(status=stop.status, reason=stop.reason, stopped_at=stop.where)
        if stop.key:
            res["config_key"] = stop.key
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
    with contextlib.suppress(Stop):
        reg = src.registry()
    archs = sorted(a for a, v in reg.items() if fam in v[0].lower() or fam in a.lower())
    return {"family": family, "vllm_version": src.version, "vllm_root": src.root, "files": files,
            "architectures": archs}


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
    root = args.vllm_root or find_package_root("vllm")
    src = why = None
    if not root or not os.path.isdir(root):
        why = "vLLM is not installed for %s (no vllm package found)" % sys.executable
        if probe == "source" or not args.model or args.all:
            emit({"kind": "error", "probe": probe,
                  "message": why + ("; give --model for a config-only answer" if probe == "model" else "")})
            return 1
    else:
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
        emit({"kind": "error", "probe": probe, "message": "no architecture: " + (
            "config.json has no `architectures` (give --arch)" if src is None else
            "give --arch, or --model with `architectures` in config.json")})
        return 1
    for arch in archs:  # without vLLM's source, what config.json alone says
        result = describe(src, arch, hf) if src is not None else config_only(hf, arch, why)
        emit({"kind": "result", "probe": "model", "result": result})
    return 0

if __name__ == "__main__":
    sys.exit(main())
