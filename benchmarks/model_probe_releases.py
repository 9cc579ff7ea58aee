"""The model-structure probe over every vLLM minor release's model registry.

For each release (newest patch of every minor from 0.10 to the newest on the registry, or
--versions), on the real wheel's source:
- bare: every registry entry described without a config -> resolved / needs_config / unresolved;
- with a config: each needs_config entry described again with a config.json that carries the
  key the probe said was missing (`config_key`: the text model's `architectures`, a
  `model_type`), filled with what a real checkpoint would hold (the HF model_type transformers
  maps the architecture to, else a Llama text model), repeated while the probe asks for another
  key. Settled = resolved then.
- time: the sweep against a baseline measured in the same run, parsing every model file with
  `ast.parse` (the floor of any static reading), as a ratio.
Goal: resolved + settled >= 95 % of the registry on every release.

    python benchmarks/model_probe_releases.py [--versions 0.16.0,0.33.0] [--transformers-root DIR]
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (the repository on sys.path)

from remote.probes import model_probe as mp
from tests.vllm_sources import vllm_root

GOAL = 0.95
FIRST_MINOR = (0, 10)


def registry_versions() -> list[str]:
    """Newest patch of every minor release >= 0.10, from `pip index versions vllm`."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"],
                         capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("Available versions:"))
    newest: dict[tuple[int, int], tuple[tuple[int, ...], str]] = {}
    for v in line.split(":", 1)[1].split(","):
        v = v.strip()
        if not re.fullmatch(r"\d+(\.\d+)+", v):  # releases only (no post/rc)
            continue
        parts = tuple(int(x) for x in v.split("."))
        minor = parts[:2]
        if minor >= FIRST_MINOR and (minor not in newest or parts > newest[minor][0]):
            newest[minor] = (parts, v)
    return [newest[k][1] for k in sorted(newest)]


def hf_model_types(transformers_root: str) -> dict[str, str]:
    """Architecture class name -> model_type, from transformers' auto mappings (read, not imported)."""
    path = Path(transformers_root) / "models" / "auto" / "modeling_auto.py"
    tree = ast.parse(path.read_text())
    out: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args):
            continue
        lst = node.value.args[0]
        if not isinstance(lst, ast.List):
            continue
        for elt in lst.elts:
            if isinstance(elt, ast.Tuple) and len(elt.elts) == 2 and isinstance(elt.elts[0], ast.Constant):
                vals = elt.elts[1].elts if isinstance(elt.elts[1], ast.Tuple) else [elt.elts[1]]
                for v in vals:
                    if isinstance(v, ast.Constant) and isinstance(v.value, str):
                        out.setdefault(v.value, elt.elts[0].value)
    return out


def fill(cfg: dict[str, Any], key: str, arch: str, types: dict[str, str]) -> None:
    """Put what a real checkpoint would hold at `key` (dotted) into `cfg`."""
    parts = key.split(".")
    cur = cfg
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    leaf = parts[-1]
    text = len(parts) > 1
    if leaf == "architectures":
        cur[leaf] = ["LlamaForCausalLM"] if text else [arch]
        cur.setdefault("model_type", "llama" if text else types.get(arch, "llama"))
    elif leaf == "model_type":
        cur[leaf] = "llama" if text else types.get(arch, "llama")
    else:
        cur[leaf] = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}


def settle(src: Any, arch: str, first: dict[str, Any], types: dict[str, str]) -> dict[str, Any]:
    cfg: dict[str, Any] = {"architectures": [arch], "num_hidden_layers": 4}
    res = first
    for _ in range(4):
        key = res.get("config_key")
        if res["status"] != "needs_config" or not key:
            break
        fill(cfg, key, arch, types)
        res = mp.describe(src, arch, json.loads(json.dumps(cfg)))
    return res


def parse_baseline(root: Path) -> float:
    t0 = time.perf_counter()
    for base in (root / "model_executor" / "models", root / "models"):
        for path in base.rglob("*.py") if base.is_dir() else []:
            try:
                ast.parse(path.read_bytes(), str(path))
            except SyntaxError:
                pass
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", help="comma-separated vLLM versions (default: every minor >= 0.10 on the registry)")
    ap.add_argument("--transformers-root", help="transformers package dir (default: this python's)")
    ap.add_argument("--details", type=Path, help="write every non-resolved entry (JSON lines) here")
    args = ap.parse_args()
    versions = args.versions.split(",") if args.versions else registry_versions()
    troot = args.transformers_root
    if troot is None:
        spec = importlib.util.find_spec("transformers")
        troot = next(iter(spec.submodule_search_locations)) if spec and spec.submodule_search_locations else None
    if troot is None:
        print("no transformers package found: give --transformers-root", file=sys.stderr)
        return 2
    types = hf_model_types(troot)
    m = re.search(r'__version__ = "([^"]+)"', (Path(troot) / "__init__.py").read_text())
    print(f"transformers source: {troot} ({m.group(1) if m else '?'})")
    print(f"{'vLLM':>8} {'registry':>8} {'resolved':>8} {'needs_cfg':>9} {'unresolv':>8} "
          f"{'settled':>7} {'ok %':>6} {'sweep s':>8} {'parse s':>8} {'ratio':>6}")
    worst = 1.0
    details = open(args.details, "w") if args.details else None
    for v in versions:
        root = vllm_root(v)
        base = parse_baseline(root)
        t0 = time.perf_counter()
        src = mp.Source(str(root), troot)
        bare = [mp.describe(src, a) for a in sorted(src.registry())]
        sweep = time.perf_counter() - t0
        counts = collections.Counter(r["status"] for r in bare)
        settled = 0
        for r in bare:
            final = r
            if r["status"] == "needs_config":
                final = settle(src, r["architecture"], r, types)
                settled += final["status"] == "resolved"
            if details and final["status"] != "resolved":
                details.write(json.dumps({"vllm": v, "architecture": r["architecture"], "bare": r["status"],
                                          "status": final["status"], "reason": final.get("reason"),
                                          "stopped_at": final.get("stopped_at")}) + "\n")
        total = len(bare)
        ok = (counts["resolved"] + settled) / total if total else 0.0
        worst = min(worst, ok)
        print(f"{v:>8} {total:>8} {counts['resolved']:>8} {counts['needs_config']:>9} {counts['unresolved']:>8} "
              f"{settled:>7} {100 * ok:>6.1f} {sweep:>8.2f} {base:>8.2f} {sweep / base if base else 0:>6.2f}")
        sys.stdout.flush()
    if details:
        details.close()
    print(f"worst release: {100 * worst:.1f} % resolved or settled by a config (goal {100 * GOAL:.0f} %)")
    return 0 if worst >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
