"""Run inside a box environment (`python -m tests.engine_capture ...`, PYTHONPATH = the speculators
overlay if any, then the repo): one real vLLM engine through pipeline.vllm_capture, and the same
samples through the `hf` backend's HiddenStateCapture, answers written as JSON.

modes:
- setup: start the engine and set up the capture; report the error if the worker refuses.
- compare: capture every sample through vLLM and through transformers at the same layer ids and
  report the largest difference per sample, with the row counts. Samples mix short and long
  prompts; `--max-batched` below the long ones' length forces chunked prefill.
"""

from __future__ import annotations

import argparse
import json
import random
import traceback
from pathlib import Path
from typing import Any


def _samples(n_vocab: int, lengths: list[int], seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, n_vocab) for _ in range(n)] for n in lengths]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["setup", "compare"])
    p.add_argument("--model", required=True)
    p.add_argument("--ids", required=True, help="our layer ids incl. N, comma-separated")
    p.add_argument("--num-layers", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--lengths", default="7,45,130,3,64,90")
    p.add_argument("--max-batched", type=int, default=None)
    p.add_argument("--max-model-len", type=int, default=256)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args()

    import torch

    from pipeline.vllm_capture import VllmCapture

    ids = [int(x) for x in a.ids.split(",")]
    worker = [i - 1 for i in ids]  # speculators 0.3's worker: output of layer L-1 = our id L
    result: dict[str, Any] = {"mode": a.mode}
    try:
        cap = VllmCapture(a.model, worker, max_model_len=a.max_model_len, dtype="float32",
                          trust_remote_code=a.trust_remote_code,
                          max_num_batched_tokens=a.max_batched)
    except Exception as exc:  # reported, not raised: the test asserts on it
        result.update(ok=False, error=f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc()[-4000:])
        Path(a.out).write_text(json.dumps(result))
        return 0
    result["ok"] = True
    if a.mode == "compare":
        from types import SimpleNamespace

        from pipeline.target import HiddenStateCapture, load_target

        cfg: Any = SimpleNamespace(model_path=Path(a.model),
                                   target=SimpleNamespace(trust_remote_code=a.trust_remote_code))
        hf = HiddenStateCapture(load_target(cfg, "cpu", torch.float32), a.num_layers)
        rows = []
        samples = _samples(a.vocab, [int(x) for x in a.lengths.split(",")], seed=1)
        for s in samples:
            got = cap.capture(s)
            want, _ = hf(torch.tensor([s]), ids)
            diffs = {str(lid): float((g.float() - want[lid].float()).abs().max())
                     for lid, g in zip(ids, got, strict=True)}
            scale = {str(lid): float(want[lid].abs().max()) for lid in ids}
            rows.append({"len": len(s), "rows": [int(g.shape[0]) for g in got],
                         "max_abs_diff": diffs, "max_abs": scale})
        result["samples"] = rows
    cap.close()
    Path(a.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
