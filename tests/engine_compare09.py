"""Run inside the vllm032 box environment (`python -m tests.engine_compare09 --config TOML
--out JSON`, PYTHONPATH = the repo) after the pipeline's extract stage ran with backend `vllm`
(speculators 0.9's files; without CUDA written through pipeline.vllm_layer_capture):
every written sample against the `hf` backend's HiddenStateCapture at the same layer ids, in
float32, answers written as JSON (per sample: tokens, rows, token ids equal, largest difference
and largest magnitude per layer id, the stored dtype).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()

    import torch
    from safetensors.torch import load_file

    from pipeline import config as config_mod
    from pipeline.manifest import stage_dir
    from pipeline.stages.extract import read_samples
    from pipeline.target import HiddenStateCapture, load_target

    cfg = config_mod.load(a.config)
    samples = read_samples(stage_dir(cfg, "prepare"))
    hs_dir = stage_dir(cfg, "extract") / "hidden_states"
    ids = cfg.all_layer_ids
    hf = HiddenStateCapture(load_target(cfg, "cpu", torch.float32), cfg.num_layers)
    rows: list[dict[str, Any]] = []
    for i, s in enumerate(samples):
        got = load_file(str(hs_dir / f"hs_{i}.safetensors"))
        states = got["hidden_states"]  # [seq, len(ids), H]
        want, _ = hf(torch.tensor([s["input_ids"]]), ids)
        diffs, scale = {}, {}
        for k, lid in enumerate(ids):
            w = want[lid].float()
            g = states[:, k, :].float()
            if g.shape != w.shape:
                diffs[str(lid)] = None
            else:
                diffs[str(lid)] = float((g - w).abs().max())
            scale[str(lid)] = float(w.abs().max())
        rows.append({"len": len(s["input_ids"]), "rows": int(states.shape[0]),
                     "ids_equal": got["token_ids"].tolist() == s["input_ids"],
                     "dtype": str(states.dtype), "max_abs_diff": diffs, "max_abs": scale})
    Path(a.out).write_text(json.dumps({"layer_ids": ids, "samples": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
