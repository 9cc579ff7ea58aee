"""Will the target fit? Parameters x dtype bytes from config.json against free memory.

evaluate loads the whole target with transformers (`from_pretrained` on the host, then `.to`
one device). On a box whose target is far bigger than one device (Kimi-K2.5: ~1T parameters,
8 GPUs), that load would run for many minutes and then die out of memory, or swap the box to a
halt. So before loading anything we do the arithmetic from config.json alone (works for a
config-only directory, reads no weights) and refuse with the figures when it cannot fit.

The count is an estimate from the architecture keys (dense attention or DeepSeek-style MLA,
dense MLP or routed + shared experts, embeddings, norms); biases and small extras are left out.
It is within a few percent for Llama, Qwen, Mixtral and DeepSeek-V3/Kimi-K2 configs.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.units import fmt_bytes

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Beyond the weights: activations of one sequence, the draft head, allocator slack.
HEADROOM_FRACTION = 0.10
HEADROOM_MIN = 1 << 30


def _int(cfg: dict[str, Any], *keys: str, default: int = 0) -> int:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v:
            return int(v)
    return default


def text_config(hf: dict[str, Any]) -> dict[str, Any]:
    """The language model's config (multimodal wrappers nest it under text_config)."""
    inner = hf.get("text_config")
    return inner if isinstance(inner, dict) else hf


def parameter_count(hf: dict[str, Any]) -> int:
    """Parameters of the causal LM described by a config.json dict (text model only)."""
    c = text_config(hf)
    h = _int(c, "hidden_size")
    layers = _int(c, "num_hidden_layers")
    vocab = _int(c, "vocab_size")
    heads = _int(c, "num_attention_heads")
    if not (h and layers and vocab and heads):
        raise ValueError("config.json lacks hidden_size, num_hidden_layers, vocab_size or "
                         "num_attention_heads")
    kv_heads = _int(c, "num_key_value_heads", default=heads)
    head_dim = _int(c, "head_dim", default=h // heads)

    kv_lora = _int(c, "kv_lora_rank")
    if kv_lora:  # DeepSeek-V2/V3 multi-head latent attention
        q_lora = _int(c, "q_lora_rank")
        nope = _int(c, "qk_nope_head_dim")
        rope = _int(c, "qk_rope_head_dim")
        v_dim = _int(c, "v_head_dim", default=nope)
        q_dim = heads * (nope + rope)
        attn = (h * q_lora + q_lora + q_lora * q_dim) if q_lora else h * q_dim
        attn += h * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v_dim)
        attn += heads * v_dim * h
    else:
        attn = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h

    inter = _int(c, "intermediate_size")
    experts = _int(c, "n_routed_experts", "num_local_experts", "num_experts")
    moe_inter = _int(c, "moe_intermediate_size", default=inter)
    shared = _int(c, "n_shared_experts")
    shared_inter = _int(c, "shared_expert_intermediate_size")
    first_dense = _int(c, "first_k_dense_replace")
    freq = _int(c, "moe_layer_freq", default=1)
    dense_mlp = 3 * h * inter
    moe_mlp = experts * 3 * h * moe_inter + h * experts
    moe_mlp += shared * 3 * h * moe_inter + (3 * h * shared_inter if shared_inter else 0)

    total = 0
    for i in range(layers):
        is_moe = experts > 0 and i >= first_dense and (i - first_dense) % freq == 0
        total += attn + (moe_mlp if is_moe else dense_mlp) + 2 * h
    tied = bool(c.get("tie_word_embeddings", hf.get("tie_word_embeddings", False)))
    total += vocab * h * (1 if tied else 2) + h
    return total


@dataclass(frozen=True)
class FitReport:
    parameters: int
    dtype: str
    weight_bytes: int
    need_bytes: int
    free: dict[str, int]  # where -> free bytes ("host", "cuda:0")

    @property
    def fits(self) -> bool:
        return all(self.need_bytes <= v for v in self.free.values())

    def arithmetic(self) -> str:
        where = ", ".join(f"{k} {fmt_bytes(v)} free" for k, v in self.free.items())
        verdict = "fits" if self.fits else "does not fit"
        return (f"{self.parameters / 1e9:.2f}B parameters x {DTYPE_BYTES[self.dtype]} bytes "
                f"({self.dtype}) = {fmt_bytes(self.weight_bytes)} of weights, "
                f"{fmt_bytes(self.need_bytes)} with headroom; {where}: {verdict}")


def host_available() -> int:
    """MemAvailable from /proc/meminfo (what can be allocated without swapping)."""
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def device_free(device: str) -> dict[str, int]:
    """Free bytes on the load path: the host always (from_pretrained materialises the weights
    there first), plus the device when it is not the CPU."""
    free = {"host": host_available()}
    if device != "cpu":
        import torch

        idx = torch.device(device).index or 0
        free[f"cuda:{idx}"] = int(torch.cuda.mem_get_info(idx)[0])
    return free


def check(model_dir: Path, dtype: str, free: dict[str, int]) -> FitReport:
    hf = json.loads((Path(model_dir) / "config.json").read_text())
    params = parameter_count(hf)
    weights = params * DTYPE_BYTES[dtype]
    need = weights + max(HEADROOM_MIN, int(weights * HEADROOM_FRACTION))
    return FitReport(params, dtype, weights, need, dict(free))
