"""What regeneration buys (issue 50): two heads for the demo target, trained with the same
settings on the same conversations, one on the dataset's answers and one on the target's own
answers regenerated through a real vLLM server, each measured by the pipeline's offline evaluate
on the same held-out prompts.

    python benchmarks/regenerate_gain.py [--epochs 8] [--concurrency 8]

Builds the demo (pipeline/demo.py) in a temporary directory, starts one vLLM server for its
target (box environment, scripts/box_env.py), and runs `python -m pipeline all` twice (this
checkout's .venv: speculators 0.3, hf extraction, offline evaluate): `regenerate = false`, then
`regenerate = true` with `vllm_url` = the server. The two configs differ only there; the held-out
prompts are chosen before regeneration, so both heads are judged on the same prompts. Prints both
mean acceptance lengths (1 + accepted/drafts) and, last, `regenerated / original acceptance: R`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import ROOT, int_options
from regenerate_speed import start_server, wait_ready

from pipeline.stages import EVALUATE, PREPARE, TRAIN
from tests import box_env
from tests.sshd_harness import free_port


def run_all(cfg: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pipeline", "all", "--config", str(cfg)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"pipeline all ({cfg.name}) failed: {done.stderr[-2000:]}")
    out = cfg.parent / cfg.stem
    manifests = {s: json.loads((out / "manifests" / f"{s}.json").read_text())["summary"]
                 for s in (PREPARE, TRAIN, EVALUATE)}
    return manifests


def main() -> int:
    args = int_options(__doc__.split("\n\n")[0], epochs=8, concurrency=8)
    python = box_env.ensure("vllm032")
    from pipeline.demo import build_demo

    with tempfile.TemporaryDirectory(prefix="regen-gain-") as tmp:
        demo = Path(tmp) / "demo"
        base = build_demo(demo, epochs=args.epochs).read_text()
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        configs = {}
        for name, extra in (("original", ""), ("regenerated", "\n".join([
                "", "regenerate = true", "regenerate_max_new_tokens = 48",
                f"regenerate_concurrency = {args.concurrency}", f'vllm_url = "{url}"']))):
            path = demo / f"{name}.toml"
            path.write_text(base.replace('output_dir = "out"', f'output_dir = "{name}"')
                            .replace("eval_samples = 8", "eval_samples = 8" + extra))
            configs[name] = path
        log = Path(tmp) / "vllm.log"
        proc = start_server(python, demo / "target", port, log)
        try:
            wait_ready(url, proc, log)
            results = {name: run_all(path) for name, path in configs.items()}
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(60)
    for name, r in results.items():
        p, t, e = r[PREPARE], r[TRAIN], r[EVALUATE]
        print(f"{name}: {p['samples']} samples, {p['loss_tokens']} answer tokens, "
              f"regenerated {p.get('regenerated', 0)}, train "
              + ", ".join(f"{k} {t[k]}" for k in ("steps", "epochs", "loss") if k in t)
              + f"; offline mean acceptance length {e['mean_length']:.3f} "
              f"(untrained head {e.get('untrained_mean_length', float('nan')):.3f})")
    ratio = results["regenerated"][EVALUATE]["mean_length"] / \
        results["original"][EVALUATE]["mean_length"]
    print(f"regenerated / original acceptance: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
