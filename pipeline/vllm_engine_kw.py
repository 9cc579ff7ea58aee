"""What both capture engines (pipeline.vllm_capture for speculators 0.3's extension,
pipeline.vllm_layer_capture for our layer hooks) ask of `vllm.LLM`, in one place: a capture
engine's settings are facts about capture (no compiled graph, no cached prefix, no vision tower),
not about which extension does it, and two copies would drift.

Runs on the box (vLLM installed); imports vLLM only to ask which text-only switch it has.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def has_vision_tower(model_path: str) -> bool:
    try:
        raw = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return "vision_config" in raw


# The one KV cache default of every engine the pipeline starts on a CPU build (the capture
# engines here, pipeline.serve's server, the extraction server): a user's setting always wins.
CPU_KV_CACHE_VAR = "VLLM_CPU_KVCACHE_SPACE"
CPU_KV_CACHE_GIB = "1"


def default_cpu_kv_cache() -> None:
    """On a box without CUDA, a 1 GiB KV cache unless VLLM_CPU_KVCACHE_SPACE says otherwise.
    Without it vLLM's CPU worker sizes the cache as `gpu_memory_utilization` (0.92) x total RAM
    minus what is used, and refuses to start unless that much is available: a suite run failed
    so (17.8 of 23.5 GiB available). Set in this process's environment, which the engine's
    workers inherit; GPU builds ignore it."""
    if not _has_cuda():
        os.environ.setdefault(CPU_KV_CACHE_VAR, CPU_KV_CACHE_GIB)


def with_cpu_kv_cache(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for an engine started as its own process (a server): the same default, set
    whether or not this process sees CUDA, since checking would import torch in a step that
    only execs vLLM; GPU builds ignore the variable."""
    out = dict(env)
    out.setdefault(CPU_KV_CACHE_VAR, CPU_KV_CACHE_GIB)
    return out


def capture_engine_kwargs(model_path: str, *, extension: str, tensor_parallel_size: int,
                          dtype: str, max_model_len: int, trust_remote_code: bool) -> dict[str, Any]:
    kw: dict[str, Any] = dict(
        model=model_path, tensor_parallel_size=tensor_parallel_size, dtype=dtype,
        max_model_len=max_model_len, trust_remote_code=trust_remote_code,
        worker_extension_cls=extension,
        # Both extensions act on modules after start-up (a swapped forward, hooks): a compiled
        # graph would keep running the original, so no compilation and no CUDA graphs.
        enforce_eager=True,
        # A cached prefix would skip the forward for those tokens: their rows would be missing.
        enable_prefix_caching=False,
        # Token ids in, states out: no tokenizer is needed.
        skip_tokenizer_init=True)
    default_cpu_kv_cache()
    if has_vision_tower(model_path):
        kw.update(text_only_kwargs())
    return kw


def text_only_kwargs() -> dict[str, Any]:
    """Text-only extraction: every modality the model declares limited to 0, so vLLM builds no
    tower for it (`_mark_tower_model` skips a tower only when all its modalities are 0) and
    profiles no encoder. The modality names are the model's own, not always "image": Kimi-K2.5
    declares only `vision_chunk`, and `{"image": 0}` left its MoonViT tower built.
    `language_model_only` (vLLM >= 0.17) is vLLM's switch for exactly that; older vLLM has only
    the per-modality limits, where image is what its multimodal wrappers declare."""
    from vllm.engine.arg_utils import EngineArgs

    if "language_model_only" in {f.name for f in dataclasses.fields(EngineArgs)}:
        return {"language_model_only": True}
    return {"limit_mm_per_prompt": {"image": 0}}


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def shutdown_engine(llm: Any) -> None:
    """Stop the engine's worker processes now, not at interpreter exit (a stage that goes on,
    or fails, must not leave them holding memory)."""
    engine = getattr(llm, "llm_engine", None)
    shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
    if callable(shutdown):
        shutdown()
