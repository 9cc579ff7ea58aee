"""Run by hand inside the vllm032 box environment (`python -m tests.engine_capture_stress ...`,
PYTHONPATH = the repo, under the team's engine lock): the hook capture of
pipeline.vllm_layer_capture under the two conditions the suite's engine test does not reach,
checked against the `hf` backend on every sample, answers written as JSON.

- `--tp 2`: tensor parallel 2 (the real box runs 8; only rank 0 captures). Needs
  VLLM_CPU_OMP_THREADS_BIND="0|1" on this CPU.
- `--blocks K`: a KV cache of K blocks of `--block-size` tokens, with many long prompts in
  flight (the long-prefill threshold keeps several partial prefills running at once), so the
  scheduler preempts running requests and recomputes them from token 0. vLLM's own
  `vllm:num_preemptions` counter says how many preemptions happened, the extension's
  `_capture_restarts` how many restarts it saw.

Why not in the suite: each run is one more engine start (minutes on the shared cores) and the
suite is at its time limit; the figures are in docs/measurements.md, and the rank and recompute
logic have engine-free tests (tests/pipeline/test_vllm_layer_hooks.py).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

_LAYERS = 4


def _build(model: Path, vocab: int, positions: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=_LAYERS, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=positions, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=1, pad_token_id=0)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(str(model))


def _metric(llm: Any, name: str) -> float | None:
    for m in llm.get_metrics():
        if m.name == name:
            return float(getattr(m, "value", 0) or 0)
    return None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, help="built here if absent (tiny Llama)")
    p.add_argument("--out", required=True)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--blocks", type=int, default=0, help="num_gpu_blocks_override (0: vLLM's)")
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--chunk", type=int, default=128, help="max_num_batched_tokens")
    p.add_argument("--long-prefill", type=int, default=16,
                   help="long_prefill_token_threshold (several partial prefills in flight)")
    p.add_argument("--samples", type=int, default=24)
    p.add_argument("--min-len", type=int, default=40)
    p.add_argument("--max-len", type=int, default=250)
    p.add_argument("--max-model-len", type=int, default=257)
    a = p.parse_args()

    model = Path(a.model)
    vocab = 512
    if not (model / "config.json").exists():
        _build(model, vocab, 512)

    import torch

    from pipeline.vllm_layer_capture import LayerCapture

    ids = list(range(1, _LAYERS + 1))
    kw: dict[str, Any] = {"block_size": a.block_size, "disable_log_stats": False,
                          "long_prefill_token_threshold": a.long_prefill}
    if a.blocks:
        kw["num_gpu_blocks_override"] = a.blocks
    t0 = time.monotonic()
    cap = LayerCapture(str(model), ids, max_model_len=a.max_model_len,
                       tensor_parallel_size=a.tp, dtype="float32",
                       max_num_batched_tokens=a.chunk, **kw)
    started = time.monotonic() - t0
    rng = random.Random(7)
    samples = [[rng.randrange(2, vocab) for _ in range(rng.randint(a.min_len, a.max_len))]
               for _ in range(a.samples)]
    t1 = time.monotonic()
    got = cap.capture(samples)
    captured = time.monotonic() - t1
    result: dict[str, Any] = {
        "tp": a.tp, "blocks": a.blocks, "block_size": a.block_size, "chunk": a.chunk,
        "long_prefill": a.long_prefill, "engine_start_s": round(started, 1),
        "capture_s": round(captured, 1), "tokens": sum(map(len, samples)),
        "num_preemptions": _metric(cap.llm, "vllm:num_preemptions"),
        "restarts_seen": cap.llm.collective_rpc("_capture_restarts")}
    cap.close()

    from types import SimpleNamespace

    from pipeline.target import HiddenStateCapture, load_target

    cfg: Any = SimpleNamespace(model_path=model, target=SimpleNamespace(trust_remote_code=False))
    hf = HiddenStateCapture(load_target(cfg, "cpu", torch.float32), _LAYERS)
    rows = []
    for s, states in zip(samples, got, strict=True):
        want, _ = hf(torch.tensor([s]), ids)
        rows.append({"len": len(s), "rows": [int(g.shape[0]) for g in states],
                     "max_abs_diff": {str(lid): float((g.float() - want[lid].float()).abs().max())
                                      for lid, g in zip(ids, states, strict=True)},
                     "max_abs": {str(lid): float(want[lid].abs().max()) for lid in ids}})
    result["samples"] = rows
    result["worst_abs_diff"] = max(max(r["max_abs_diff"].values()) for r in rows)
    Path(a.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
