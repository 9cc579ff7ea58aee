"""Tiny targets built from config (no hub), shaped like the founding case where it matters.

`build_llava_next`: transformers' LlavaNextForConditionalGeneration (a CLIP vision tower and a
Llama text model under `language_model`). vLLM 0.16's class of the same name does not implement
SupportsEagle3 and has no `.model`, exactly the two things speculators 0.3's worker trips on
with Kimi-K2.5, but with standard attention (vLLM 0.16 on CPU has no MLA backend). head_dim 32
(16 is refused by the CPU attention). Runs in any environment with transformers >= 4.56.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


# --- Kimi-K2.5 -----------------------------------------------------------------------------

KIMI_LAYERS = 4
KIMI_HIDDEN = 64
KIMI_MEDIA_TOKENS = ["<|media_begin|>", "<|media_content|>", "<|media_pad|>", "<|media_end|>",
                     "<|kimi_k25_video_placeholder|>"]
_REMOTE_CODE = Path(__file__).parent / "kimi_k25_remote"


def kimi_k25_text_config(vocab_size: int) -> dict[str, object]:
    """Kimi-K2.5's text model (DeepSeek-V3: MLA + MoE, sigmoid/noaux_tc routing, first layer
    dense), shrunk in width, depth and experts. The MLA head dims stay the real model's
    (kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128): vLLM 0.32's
    CPU MLA decode kernel compiles for a 576 latent only, and with nope/v heads of 32 its CPU
    path computes wrong states from the second position on (measured against transformers:
    relative error ~1 at layer 1, 1-3 % = bf16 noise with 128/128; docs/measurements.md)."""
    return {
        "model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"],
        "vocab_size": vocab_size, "hidden_size": KIMI_HIDDEN, "intermediate_size": 128,
        "moe_intermediate_size": 32, "num_hidden_layers": KIMI_LAYERS,
        "num_attention_heads": 2, "num_key_value_heads": 2,
        "n_shared_experts": 1, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "routed_scaling_factor": 2.827, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
        "norm_topk_prob": True, "kv_lora_rank": 512, "q_lora_rank": 48,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
        "num_nextn_predict_layers": 0, "max_position_embeddings": 512, "rope_theta": 50000.0,
        "rms_norm_eps": 1e-5, "hidden_act": "silu", "attention_bias": False,
        "tie_word_embeddings": False, "initializer_range": 0.02,
    }


KIMI_VISION_CONFIG: dict[str, object] = {
    "patch_size": 14, "init_pos_emb_height": 4, "init_pos_emb_width": 4, "init_pos_emb_time": 4,
    "pos_emb_type": "divided_fixed", "num_attention_heads": 2, "num_hidden_layers": 1,
    "hidden_size": 32, "intermediate_size": 64, "merge_kernel_size": [2, 2],
    "video_attn_type": "spatial_temporal", "merge_type": "sd2_tpool",
    "mm_projector_type": "patchmerger", "mm_hidden_size": 32, "projector_hidden_act": "gelu",
    "projector_ln_eps": 1e-5,
}

# The hub repo's preprocessor_config.json keys (vLLM's KimiK25FusedVisionProcessor reads
# media_proc_cfg), with patch limits shrunk so the engine's dummy image stays a few patches.
KIMI_MEDIA_PROC_CFG: dict[str, object] = {
    "in_patch_limit": 64, "patch_size": 14, "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5], "merge_kernel_size": 2, "fixed_output_tokens": None,
    "patch_limit_on_one_side": 16, "in_patch_limit_each_frame": 64,
    "in_patch_limit_video": None, "sample_fps": 2.0, "max_num_frames_each_video": None,
    "temporal_merge_kernel_size": 4, "timestamp_mode": "hh:mm:ss.fff",
    "config_type": "media_proc_cfg", "media_proc_type": "fused",
}


def _kimi_vision_tensors(gen: object) -> dict[str, object]:
    """The MoonViT tower + patch-merger projector under the hub checkpoint's names (the names
    vLLM's MoonViT3dPretrainedModel / KimiK25MultiModalProjector load, via its mapper)."""
    import torch

    v = KIMI_VISION_CONFIG
    d, mlp, p = int(v["hidden_size"]), int(v["intermediate_size"]), int(v["patch_size"])  # type: ignore[call-overload]
    merged = d * 4

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.02  # type: ignore[call-overload]

    t: dict[str, object] = {
        "vision_tower.patch_embed.proj.weight": r(d, 3, p, p),
        "vision_tower.patch_embed.proj.bias": r(d),
        "vision_tower.patch_embed.pos_emb.weight": r(int(v["init_pos_emb_height"]),  # type: ignore[call-overload]
                                                     int(v["init_pos_emb_width"]), d),  # type: ignore[call-overload]
        "vision_tower.encoder.final_layernorm.weight": 1 + r(d),
        "vision_tower.encoder.final_layernorm.bias": r(d),
        "mm_projector.pre_norm.weight": 1 + r(d), "mm_projector.pre_norm.bias": r(d),
        "mm_projector.proj.0.weight": r(merged, merged), "mm_projector.proj.0.bias": r(merged),
        "mm_projector.proj.2.weight": r(KIMI_HIDDEN, merged), "mm_projector.proj.2.bias": r(KIMI_HIDDEN),
    }
    for i in range(int(v["num_hidden_layers"])):  # type: ignore[call-overload]
        b = f"vision_tower.encoder.blocks.{i}"
        t |= {f"{b}.norm0.weight": 1 + r(d), f"{b}.norm0.bias": r(d),
              f"{b}.norm1.weight": 1 + r(d), f"{b}.norm1.bias": r(d),
              f"{b}.wqkv.weight": r(3 * d, d), f"{b}.wqkv.bias": r(3 * d),
              f"{b}.wo.weight": r(d, d), f"{b}.wo.bias": r(d),
              f"{b}.mlp.fc0.weight": r(mlp, d), f"{b}.mlp.fc0.bias": r(mlp),
              f"{b}.mlp.fc1.weight": r(d, mlp), f"{b}.mlp.fc1.bias": r(d)}
    return t


def build_kimi_k25(model_dir: Path, *, seed: int = 0, rows: list[dict[str, Any]] | None = None,
                   steps: int = 0) -> Path:
    """A tiny checkpoint of vLLM's own KimiK25ForConditionalGeneration, laid out as the hub repo
    moonshotai/Kimi-K2.5 (config schema, auto_map remote code, tensor names), random weights.

    The text weights come from transformers' DeepseekV3ForCausalLM (transformers 4.5x or 5.x),
    saved under `language_model.`; the vision tower is MoonViT-shaped (1 block, 32 wide).
    vLLM 0.32 loads it natively (model_type kimi_k25 -> transformers 5's Kimi_K25Config);
    transformers 4.x loads it through the shipped remote code (trust_remote_code).

    With `rows` and `steps`, the text model is first trained on those conversations as the
    demo's target is (pipeline.demo.build_target): a random target's next token is noise no
    head predicts, so served acceptance would say nothing."""
    import json
    import shutil

    import torch
    from safetensors.torch import save_file
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    from pipeline.demo import build_tokenizer, train_on_conversations

    model_dir.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(model_dir)
    tok.add_tokens(KIMI_MEDIA_TOKENS, special_tokens=True)
    tok.save_pretrained(str(model_dir))
    text = kimi_k25_text_config(len(tok))
    torch.manual_seed(seed)
    lm_cfg = DeepseekV3Config(**{k: v for k, v in text.items() if k != "model_type"})
    lm = DeepseekV3ForCausalLM(lm_cfg)
    if rows and steps:
        train_on_conversations(lm, tok, rows, steps=steps, seed=seed)
    lm.eval()
    gen = torch.Generator().manual_seed(seed + 1)
    tensors: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, p in lm.state_dict().items():
            if "norm" in name:  # norms away from 1 so pre- and post-norm states differ clearly
                p = p + torch.randn(p.shape, generator=gen) * 0.3
            tensors[f"language_model.{name}"] = p.detach().clone().contiguous()
    tensors |= _kimi_vision_tensors(gen)  # type: ignore[arg-type]
    save_file({k: v.to(torch.bfloat16) for k, v in tensors.items()},
              str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    pad = tok.convert_tokens_to_ids("<pad>")
    media_pad = tok.convert_tokens_to_ids("<|media_pad|>")
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                     "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
                     "AutoModelForCausalLM": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
        "text_config": {**text, "pad_token_id": pad, "bos_token_id": tok.bos_token_id,
                        "eos_token_id": tok.eos_token_id, "torch_dtype": "bfloat16"},
        "vision_config": KIMI_VISION_CONFIG, "media_placeholder_token_id": media_pad,
        "image_token_id": media_pad, "pad_token_id": pad, "ignore_index": -100,
        "use_unified_vision_chunk": True, "video_placeholder": "<|kimi_k25_video_placeholder|>",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    (model_dir / "config.json").write_text(json.dumps(config, indent=2))
    (model_dir / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "KimiK25VisionProcessor", "media_proc_cfg": KIMI_MEDIA_PROC_CFG},
        indent=2))
    for f in ("configuration_kimi_k25.py", "modeling_kimi_k25.py"):
        shutil.copy2(_REMOTE_CODE / f, model_dir / f)
    return model_dir


def build_kimi_pipeline(root: Path, *, rows: int = 240, samples: int = 0, eval_samples: int = 8,
                        epochs: int = 8, max_new_tokens: int = 24, backend: str = "hf",
                        target_steps: int = 150, seed: int = 0) -> Path:
    """A pipeline directory around a tiny Kimi-K2.5 (the demo's conversations and tokenizer,
    target.trust_remote_code = true as the real checkpoint needs); returns pipeline.toml.
    The vllm backend extracts in bfloat16: vLLM's CPU MLA refuses float32 weights ("expect
    weight to be bfloat16, float16, ..." from its packed-weight conversion)."""
    import json

    from pipeline.demo import conversations, pipeline_toml

    root.mkdir(parents=True, exist_ok=True)
    convs = conversations(rows, seed)
    build_kimi_k25(root / "target", seed=seed, rows=convs, steps=target_steps)
    (root / "conversations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in convs))
    cfg = root / "pipeline.toml"
    cfg.write_text(pipeline_toml(
        title="# A tiny Kimi-K2.5 (tests/tiny_targets.py build_kimi_k25). Absolute paths: the console\n"
              "# uploads this file to the box's <workdir>/configs/.",
        output_dir=f"{root.resolve()}/out", model=f"{root.resolve()}/target",
        dataset=f"{root.resolve()}/conversations.jsonl", trust_remote_code=True, samples=samples,
        eval_samples=eval_samples, epochs=epochs, max_new_tokens=max_new_tokens, backend=backend,
        dtype="bfloat16" if backend == "vllm" else "float32"))
    return cfg
