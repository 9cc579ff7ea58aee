"""Test doubles for the few vLLM names speculators 0.3.0's custom_worker.py imports, and vLLM-shaped
models built around a real tiny HF Llama on CPU.

vLLM cannot run here (no GPU); these stand-ins are kept faithful to vLLM 0.16 as read from its
wheel (docs/design.md §2.1): decoder layers take (positions, hidden_states, residual) and return
(hidden_states, residual) with the residual add fused into the next norm; `norm(x, residual)`
returns (normed, x + residual); the decoder exposes `layers`, `start_layer`, `end_layer`, `norm`
and `embed_input_ids` (0.16) or `get_input_embeddings` (<= 0.15); Kimi-K2.5's wrapper keeps the
decoder at `language_model.model` and has no top-level `.model`.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch import nn


class _Group:
    """Test double for vLLM's GroupCoordinator: a single rank, first and last."""

    is_first_rank = True
    is_last_rank = True
    rank_in_group = 0


class IntermediateTensors(dict):  # type: ignore[type-arg]
    """Test double for vllm.sequence.IntermediateTensors (a dict of tensors)."""


def supports_eagle3(model: Any) -> bool:
    """Test double for vllm's supports_eagle3: the SupportsEagle3 ClassVar flag (in vLLM 0.16
    Llama sets it; KimiK25ForConditionalGeneration does not)."""
    return bool(getattr(type(model), "supports_eagle3", False))


def vllm_modules() -> dict[str, types.ModuleType]:
    """sys.modules entries standing for the vllm package (test doubles)."""
    mods = {name: types.ModuleType(name) for name in (
        "vllm", "vllm.distributed", "vllm.model_executor", "vllm.model_executor.models",
        "vllm.model_executor.models.interfaces", "vllm.sequence")}
    group = _Group()
    mods["vllm.distributed"].get_pp_group = lambda: group  # type: ignore[attr-defined]
    mods["vllm.distributed"].get_tp_group = lambda: group  # type: ignore[attr-defined]
    mods["vllm.model_executor.models.interfaces"].supports_eagle3 = (  # type: ignore[attr-defined]
        supports_eagle3)
    mods["vllm.sequence"].IntermediateTensors = IntermediateTensors  # type: ignore[attr-defined]
    return mods


def load_worker(path: Path, name: str) -> types.ModuleType:
    """Import custom_worker.py from `path` (vllm doubles must already be in sys.modules),
    without running the speculators package __init__."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class FusedRMSNorm(nn.Module):
    """Test double for vLLM's RMSNorm: norm(x) or, with a residual, (norm(x + r), x + r)."""

    def __init__(self, hf_norm: nn.Module) -> None:
        super().__init__()
        self.inner = hf_norm

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> Any:
        if residual is None:
            return self.inner(x)
        total = x + residual
        return self.inner(total), total


class VllmStyleLlamaLayer(nn.Module):
    """Test double for vLLM's LlamaDecoderLayer around the HF layer's real weights: tokens are
    flattened ([num_tokens, H]) and the residual stream travels separately."""

    def __init__(self, hf_layer: nn.Module, rotary: nn.Module) -> None:
        super().__init__()
        self.hf = hf_layer
        self.rotary = rotary
        self.input_layernorm = FusedRMSNorm(hf_layer.input_layernorm)
        self.post_attention_layernorm = FusedRMSNorm(hf_layer.post_attention_layernorm)

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor,
                residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        x = hidden_states.unsqueeze(0)
        cos_sin = self.rotary(x, positions.unsqueeze(0))
        attn, _ = self.hf.self_attn(x, position_embeddings=cos_sin, attention_mask=None)
        hidden_states, residual = self.post_attention_layernorm(attn.squeeze(0), residual)
        return self.hf.mlp(hidden_states), residual


class VllmStyleDecoder(nn.Module):
    """Test double for vLLM's LlamaModel / DeepseekV2Model (the module holding `layers`), with
    the unpatched vLLM forward."""

    def __init__(self, hf_model: nn.Module, *, embed_name: str = "embed_input_ids") -> None:
        super().__init__()
        inner = hf_model.model
        self.embed_tokens = inner.embed_tokens
        self.layers = nn.ModuleList(VllmStyleLlamaLayer(layer, inner.rotary_emb)
                                    for layer in inner.layers)
        self.norm = FusedRMSNorm(inner.norm)
        self.start_layer, self.end_layer = 0, len(self.layers)
        # vLLM 0.16 names it embed_input_ids; up to 0.15 get_input_embeddings.
        setattr(self, embed_name, self._embed)

    def _embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                intermediate_tensors: Any = None, inputs_embeds: Any = None) -> torch.Tensor:
        embed = getattr(self, "embed_input_ids", None) or self.get_input_embeddings
        hidden = inputs_embeds if inputs_embeds is not None else embed(input_ids)
        residual = None
        for layer in islice(self.layers, self.start_layer, self.end_layer):
            hidden, residual = layer(positions, hidden, residual)
        hidden, _ = self.norm(hidden, residual)
        return hidden


class LlamaForCausalLM(nn.Module):
    """Test double shaped like vLLM's LlamaForCausalLM: decoder at `.model`, SupportsEagle3."""

    supports_eagle3 = True

    def __init__(self, decoder: nn.Module) -> None:
        super().__init__()
        self.model = decoder


class DeepseekV2ForCausalLM(nn.Module):
    """Test double for the language model Kimi-K2.5 wraps: decoder at `.model`."""

    def __init__(self, decoder: nn.Module) -> None:
        super().__init__()
        self.model = decoder


class KimiK25ForConditionalGeneration(nn.Module):
    """Test double shaped like vLLM 0.16's KimiK25ForConditionalGeneration: `language_model`
    (.model holds the layers), `vision_tower`, `mm_projector`, no top-level `.model`, no
    SupportsEagle3; `get_language_model()` as SupportsMultiModal provides it."""

    def __init__(self, decoder: nn.Module, *, with_getter: bool = True) -> None:
        super().__init__()
        self.vision_tower = nn.Identity()
        self.mm_projector = nn.Identity()
        self.language_model = DeepseekV2ForCausalLM(decoder)
        if with_getter:
            self.get_language_model = lambda: self.language_model


class NoLayersModel(nn.Module):
    """A model with no decoder layers anywhere the chain looks."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(2, 2)
