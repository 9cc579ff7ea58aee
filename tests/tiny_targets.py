"""Tiny targets built from config (no hub), shaped like the founding case where it matters.

`build_llava_next`: transformers' LlavaNextForConditionalGeneration (a CLIP vision tower and a
Llama text model under `language_model`). vLLM 0.16's class of the same name does not implement
SupportsEagle3 and has no `.model`, exactly the two things speculators 0.3's worker trips on
with Kimi-K2.5, but with standard attention (vLLM 0.16 on CPU has no MLA backend). head_dim 32
(16 is refused by the CPU attention). Runs in any environment with transformers >= 4.56.
"""

from __future__ import annotations

from pathlib import Path

NUM_LAYERS = 4
HIDDEN = 64


def build_llava_next(model_dir: Path, *, seed: int = 0) -> Path:
    import torch
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
    )

    from pipeline.demo import build_tokenizer

    model_dir.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(model_dir)
    torch.manual_seed(seed)
    text = LlamaConfig(vocab_size=len(tok) + 1, hidden_size=HIDDEN, intermediate_size=128,
                       num_hidden_layers=NUM_LAYERS, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
                       rms_norm_eps=1e-5, tie_word_embeddings=False,
                       architectures=["LlamaForCausalLM"])  # as llava-hf checkpoints have it
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=1, image_size=32, patch_size=16,
                              projection_dim=32)
    config = LlavaNextConfig(vision_config=vision.to_dict(), text_config=text.to_dict(),
                             image_token_index=len(tok), image_grid_pinpoints=[[32, 32]],
                             vision_feature_layer=-2, projector_hidden_act="gelu")
    config.torch_dtype = "float32"
    model = LlavaNextForConditionalGeneration(config).eval()
    with torch.no_grad():  # norms away from 1 so pre- and post-norm states differ clearly
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(str(model_dir))
    return model_dir
