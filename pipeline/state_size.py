"""How many bytes a token's hidden states take on disk: the figure extract prints before it
writes, checks against the free disk, and records in its manifest (57,344 B of states a token at
Kimi-K2.5's width: 4 layers x 7168 x bf16). Apart from the config so the sizing rule is read in
one place by validate, extract, shard extract and the write benchmark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.config_types import PipelineConfig


def stored_state_dtype(cfg: PipelineConfig, fmt: str | None = None) -> str:
    """The dtype extract stores states in: bf16, except speculators 0.9 files from the `vllm`
    backend, which keep the engine's dtype (vLLM's hidden-states connector writes them so)."""
    if fmt == "0.9" and cfg.extract.backend == "vllm":
        return cfg.extract.dtype
    return "bfloat16"


def bytes_per_token(cfg: PipelineConfig, fmt: str | None = None) -> int:
    """Extracted bytes per token: (3 aux + last) × hidden × the stored dtype's size (bf16 unless
    stored_state_dtype says otherwise) + ids and mask (int64)."""
    size = 4 if stored_state_dtype(cfg, fmt) == "float32" else 2
    return len(cfg.all_layer_ids) * cfg.hidden_size * size + 16
