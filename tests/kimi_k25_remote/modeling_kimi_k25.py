"""Remote-code model for the tiny Kimi-K2.5 test checkpoint, for transformers' text path.

Same module tree and tensor names as the hub checkpoint and vLLM's KimiK25ForConditionalGeneration
(`language_model.model.layers.*`, `language_model.lm_head`, `vision_tower.*`, `mm_projector.*`):
the text model is transformers' own DeepseekV3ForCausalLM (MLA + MoE), so hidden states, logits
and the final norm are the real ones. The vision tower and projector are built with the real
shapes so the checkpoint loads whole, but this file does not implement the MoonViT forward:
the pipeline feeds token ids only (the hub's modeling file runs images; vLLM's class is what
exercises the tower here).
"""

import torch
from torch import nn
from transformers import DeepseekV3ForCausalLM, GenerationMixin, PreTrainedModel

from .configuration_kimi_k25 import KimiK25Config


class _Block(nn.Module):
    def __init__(self, dim, mlp):
        super().__init__()
        self.norm0 = nn.LayerNorm(dim)
        self.norm1 = nn.LayerNorm(dim)
        self.wqkv = nn.Linear(dim, 3 * dim)
        self.wo = nn.Linear(dim, dim)
        self.mlp = nn.Module()
        self.mlp.fc0 = nn.Linear(dim, mlp)
        self.mlp.fc1 = nn.Linear(mlp, dim)


class _VisionTower(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.hidden_size
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, d, cfg.patch_size, cfg.patch_size)
        self.patch_embed.pos_emb = nn.Module()
        self.patch_embed.pos_emb.weight = nn.Parameter(
            torch.zeros(cfg.init_pos_emb_height, cfg.init_pos_emb_width, d))
        self.encoder = nn.Module()
        self.encoder.blocks = nn.ModuleList(
            _Block(d, cfg.intermediate_size) for _ in range(cfg.num_hidden_layers))
        self.encoder.final_layernorm = nn.LayerNorm(d)


class _Projector(nn.Module):
    def __init__(self, cfg, out_hidden):
        super().__init__()
        merged = cfg.mm_hidden_size * cfg.merge_kernel_size[0] * cfg.merge_kernel_size[1]
        self.pre_norm = nn.LayerNorm(cfg.mm_hidden_size, eps=cfg.projector_ln_eps)
        self.proj = nn.Sequential(nn.Linear(merged, merged), nn.GELU(),
                                  nn.Linear(merged, out_hidden))


class KimiK25ForConditionalGeneration(PreTrainedModel, GenerationMixin):
    config_class = KimiK25Config
    base_model_prefix = ""
    _no_split_modules = ["DeepseekV3DecoderLayer"]
    _supports_sdpa = True

    def __init__(self, config):
        super().__init__(config)
        self.vision_tower = _VisionTower(config.vision_config)
        self.mm_projector = _Projector(config.vision_config, config.text_config.hidden_size)
        self.language_model = DeepseekV3ForCausalLM(config.text_config)
        self.post_init()

    def get_input_embeddings(self):
        return self.language_model.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.language_model.set_input_embeddings(value)

    def get_output_embeddings(self):
        return self.language_model.get_output_embeddings()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None,
                past_key_values=None, inputs_embeds=None, labels=None, use_cache=None,
                output_hidden_states=None, return_dict=None, pixel_values=None, **kwargs):
        if pixel_values is not None:
            raise NotImplementedError("this test checkpoint's remote code runs text only")
        return self.language_model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
            past_key_values=past_key_values, inputs_embeds=inputs_embeds, labels=labels,
            use_cache=use_cache, output_hidden_states=output_hidden_states,
            return_dict=return_dict, **kwargs)
