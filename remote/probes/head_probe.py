"""Can this box's vLLM serve this draft for this target? Answered before any engine starts.

Runs on the box with the python that would serve (stdlib only, Python >= 3.8), reading files
only: the head's config.json and its safetensors headers (head_files.py: no tensor's bytes),
the target's config.json, and vLLM's own source (spec_methods.py: the methods this build
accepts and whether its CPU runner refuses speculative decoding; model_probe.py: whether the
target's architecture implements SupportsEagle3 and which aux layer ids it can capture).

Each mismatch is one line naming both values (the head's and the target's, or the method and
the build); `console probe head` and `console serve start` print them and start nothing.

Output: one JSON line `{"kind": "result", "probe": "head", "result": {...}}` with the facts
read and `mismatches` (refusals) and `warnings` (served all the same).
  head_probe.py --method eagle3 --head DIR --target DIR [--vllm-root DIR]
  head_probe.py --method ngram                                (the build alone)
"""

import argparse
import json
import os
import signal
import sys

if not __package__:  # run as a script on the box: the siblings uploaded beside it are its package
    import types

    __package__ = "eagle3_probes"
    sys.modules[__package__] = types.ModuleType(__package__)
    sys.modules[__package__].__path__ = [os.path.dirname(os.path.abspath(__file__))]
from . import head_files, model_probe, spec_methods
from .find_package import package_dir
from .probe_errors import HeadFileError

EAGLE3_METHODS = ("eagle3",)


def read_head(head, out):
    """The head's config facts and tensors (None where unreadable), each problem a mismatch."""
    conf_path = os.path.join(head, "config.json")
    if not os.path.isdir(head):
        out["mismatches"].append("%s: no such head directory" % head)
        return None, None
    if not os.path.isfile(conf_path):
        out["mismatches"].append("%s has no config.json: not a head directory (vLLM reads the "
                                 "head's config.json first)" % head)
        return None, None
    try:
        conf = head_files.read_json(conf_path)
    except (OSError, ValueError) as exc:
        out["mismatches"].append("%s: not JSON (%s)" % (conf_path, exc))
        return None, None
    if not isinstance(conf, dict):
        out["mismatches"].append("%s: not a JSON object" % conf_path)
        return None, None
    facts = head_files.head_facts(conf)
    if facts["format"] is None:
        out["mismatches"].append(
            "%s is not an EAGLE-3 head's config: it has neither speculators_model_type "
            "(speculators format) nor an Eagle3 architecture or draft_vocab_size (EAGLE-3 HF "
            "format); architectures %s" % (conf_path, conf.get("architectures")))
    elif facts["format"] == "speculators" and facts["speculators_model_type"] not in (
            "eagle3", "peagle"):
        out["mismatches"].append("%s: speculators_model_type is %r, method eagle3 serves an "
                                 "eagle3 head" % (conf_path, facts["speculators_model_type"]))
    st, other = head_files.weight_files(head)
    tensors = None
    if not st and other:
        out["warnings"].append("%s keeps its weights in %s: tensor shapes not checked (only "
                               "safetensors headers are read)" % (head, ", ".join(other)))
    elif not st:
        out["mismatches"].append("%s has no weights (no *.safetensors, no pytorch_model.bin)"
                                 % head)
    else:
        try:
            tensors = head_files.head_tensors(head)
        except (OSError, HeadFileError) as exc:
            out["mismatches"].append("%s/%s" % (head, exc) if isinstance(exc, HeadFileError)
                                     else "%s: %s" % (head, exc))
    return facts, tensors


def _shape(tensors, name):
    return next((info["shape"] for key, info in (tensors or {}).items()  # `model.fc.weight` too
                 if key == name or key.endswith("." + name)), None)


def compare(facts, tensors, target, max_aux_id, out, build="this vLLM"):
    """The head against the target: each mismatch one line naming both values."""
    mm = out["mismatches"]
    th, tv, n = target.get("hidden_size"), target.get("vocab_size"), target.get("num_layers")
    expects = facts.get("target_hidden_size") or facts.get("hidden_size")
    key = "target_hidden_size" if facts.get("target_hidden_size") else facts["hidden_size_key"]
    hidden_off = bool(th and expects and expects != th)
    if hidden_off:
        mm.append("hidden size: the head expects a target of hidden size %d (config.json %s), "
                  "the target's is %d (its config.json hidden_size)" % (expects, key, th))
    aux = facts.get("aux_layer_ids")
    n_aux = len(aux) if aux else 3
    fc = _shape(tensors, "fc.weight")
    if fc and len(fc) == 2 and th and not hidden_off and fc[1] != n_aux * th:
        mm.append("hidden size: fc.weight takes %d inputs (shape %s), the target's %d aux layers "
                  "give %d x %d = %d" % (fc[1], fc, n_aux, n_aux, th, n_aux * th))
    dv = facts.get("draft_vocab_size")
    d2t, t2d = _shape(tensors, "d2t"), _shape(tensors, "t2d")
    if dv and d2t and d2t[0] != dv:
        mm.append("d2t has %d entries (shape %s), the head's draft_vocab_size is %d"
                  % (d2t[0], d2t, dv))
    if tv and t2d and t2d[0] != tv:
        mm.append("t2d has %d entries (shape %s), the target's vocab_size is %d"
                  % (t2d[0], t2d, tv))
    if tv and dv and dv > tv:
        mm.append("draft_vocab_size %d is larger than the target's vocab_size %d" % (dv, tv))
    lm = _shape(tensors, "lm_head.weight")
    if lm and dv and lm[0] != dv:
        mm.append("lm_head.weight has %d rows (shape %s), the head's draft_vocab_size is %d"
                  % (lm[0], lm, dv))
    emb = _shape(tensors, "embed_tokens.weight")
    if emb and tv and emb[0] != tv:
        mm.append("embed_tokens.weight has %d rows (shape %s), the target's vocab_size is %d"
                  % (emb[0], emb, tv))
    if aux and n:
        top = max_aux_id if max_aux_id is not None else n - 1
        past = [i for i in aux if i < 0 or i > top]
        for i in past:
            mm.append("aux layer id %d (config.json %s) is past the target's %d layers "
                      "(%s captures ids 0..%d)"
                      % (i, facts["aux_layer_ids_from"], n, build, top))
    if tensors:
        dtypes = sorted({head_files.dtype_word(t["dtype"]) for k, t in tensors.items()
                         if k.split(".")[-1] not in ("d2t", "t2d")})
        # Said, never refused: vLLM loads the draft in the dtype it resolves for the target
        # (speculative.py: dtype=self.target_model_config.dtype; on CPU a float32 config is
        # served in bfloat16), whatever the head was saved in.
        out["head"]["tensor_dtypes"] = dtypes


def target_support(root, target, target_conf, method, out):
    """The target's architecture in this vLLM: SupportsEagle3, the eagle3 model-type gate, and
    the highest aux id its layers owner records. Returns that id (None: not known)."""
    archs = target.get("architectures") or []
    if not archs or root is None:
        return None
    res = model_probe.describe(model_probe.Source(root), archs[0], target_conf)
    build = spec_methods.build_text(spec_methods.build(root))
    out["target"]["vllm"] = {k: res.get(k) for k in ("status", "supports_eagle3", "layers_path",
                                                     "default_aux_layers", "aux_capture",
                                                     "reason", "stopped_at")}
    if method in EAGLE3_METHODS:
        if res.get("supports_eagle3") is False:
            where = ((res.get("registry") or {}).get("file")) or res.get("stopped_at") or ""
            out["mismatches"].append("%s: the target's architecture %s does not implement "
                                     "SupportsEagle3 (%s): it cannot serve an EAGLE-3 head"
                                     % (build, archs[0], where))
        elif res.get("supports_eagle3") is None:
            out["warnings"].append("%s: whether %s implements SupportsEagle3 is not known: %s"
                                   % (build, archs[0], res.get("reason")))
        gate = res.get("eagle3_config_gate") or {}
        if gate.get("present") and gate.get("allows") is False:
            out["mismatches"].append("%s allows eagle3 only for model types %s (%s); the "
                                     "target's is %s" % (build, gate.get("model_types"),
                                                         gate.get("file"),
                                                         gate.get("model_type")))
    n = target.get("num_layers")
    capture = res.get("aux_capture") or {}
    if not n or not capture:
        return None
    return n if capture.get("recorded") == "after_call" else n - 1


def probe(method, head, target_dir, vllm_root):
    out = {"method": method, "head_dir": head, "target_dir": target_dir, "mismatches": [],
           "warnings": [], "head": {}, "target": {}}
    root = vllm_root or package_dir("vllm")
    if not root or not os.path.isdir(root):
        out["mismatches"].append("vLLM is not installed for %s: nothing on this box can serve "
                                 "method %s" % (sys.executable, method))
        root = None
    else:
        refused, info = spec_methods.refusals(root, method)
        out["vllm"] = info
        out["mismatches"].extend(refused)
    facts, tensors = read_head(head, out) if head else (None, None)
    if facts is not None:
        out["head"].update(facts)
    if tensors is not None:
        out["head"]["tensors"] = {k: [v["dtype"], v["shape"]] for k, v in sorted(tensors.items())
                                  if "." not in k or k.split(".")[-1] in ("d2t", "t2d")
                                  or k.endswith(("fc.weight", "lm_head.weight",
                                                 "embed_tokens.weight"))}
    target = None
    if target_dir:
        path = target_dir if target_dir.endswith(".json") else \
            os.path.join(target_dir, "config.json")
        try:
            target_conf = head_files.read_json(path)
            target = head_files.target_facts(target_conf)
            out["target"].update(target)
        except (OSError, ValueError) as exc:
            out["mismatches"].append("the target's config %s cannot be read: %s" % (path, exc))
            target_conf = None
        if target is not None and method in EAGLE3_METHODS:
            max_aux = target_support(root, target, target_conf, method, out)
            if facts is not None and facts["format"] is not None:
                build = spec_methods.build_text(spec_methods.build(root)) if root else None
                compare(facts, tensors, target, max_aux, out, build or "this vLLM")
    out["ok"] = not out["mismatches"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="eagle3", help="the speculative method to serve")
    ap.add_argument("--head", help="the head directory (config.json + *.safetensors)")
    ap.add_argument("--target", help="the target's HF directory (or its config.json)")
    ap.add_argument("--vllm-root", help="the vllm package directory (default: the installed one)")
    ap.add_argument("--deadline", type=int, default=0,
                    help="seconds after which the probe ends itself (the console stopped waiting)")
    args = ap.parse_args(argv)
    if args.deadline > 0 and hasattr(signal, "alarm"):
        signal.alarm(args.deadline)  # SIGALRM's default action ends the process
    head = os.path.abspath(os.path.expanduser(args.head)) if args.head else None
    target = os.path.abspath(os.path.expanduser(args.target)) if args.target else None
    sys.stdout.write(json.dumps({"kind": "result", "probe": "head",
                                 "result": probe(args.method, head, target, args.vllm_root)},
                                sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
