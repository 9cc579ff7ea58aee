"""EAGLE-3 head directories for the head-probe tests, written with the real safetensors library:
a target's config.json and heads in both formats vLLM serves (speculators, the common EAGLE-3
HF format), each a few KB, with one thing changed where a test asks (a hidden size, an aux id,
a d2t length, a missing config, a truncated file).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

# The demo target's shape (pipeline/demo.py: 4 layers, hidden 64, head_dim 32), vocab small.
TARGET = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "num_hidden_layers": 4, "vocab_size": 256, "intermediate_size": 128,
          "num_attention_heads": 2, "num_key_value_heads": 1, "torch_dtype": "float32"}


def target(root: Path, **over: object) -> Path:
    d = root / "target"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({**TARGET, **over}))
    return d


def head(root: Path, name: str = "head", *, fmt: str = "speculators", hidden: int = 64,
         target_hidden: int | None = None, draft_vocab: int = 128, vocab: int = 256,
         aux: list[int] | None = None, d2t_len: int | None = None,
         dtype: type = np.float32) -> Path:
    """root/name: config.json + model.safetensors of a one-layer EAGLE-3 head."""
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    aux = [1, 2, 3] if aux is None else aux
    th = target_hidden or hidden
    layer = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
             "num_hidden_layers": 1, "vocab_size": vocab, "intermediate_size": 2 * hidden,
             "num_attention_heads": 2, "num_key_value_heads": 1, "torch_dtype": "float32"}
    if fmt == "speculators":
        conf: dict[str, object] = {
            "speculators_model_type": "eagle3", "transformer_layer_config": layer,
            "draft_vocab_size": draft_vocab, "eagle_aux_hidden_state_layer_ids": aux,
            "speculators_config": {"proposal_methods": [{"speculative_tokens": 3}],
                                   "verifier": {"name_or_path": "target"}}}
        if target_hidden:
            conf["target_hidden_size"] = target_hidden
    else:  # yuhuili/EAGLE3-* style: a plain HF config with an Eagle3 architecture
        conf = {**layer, "architectures": ["LlamaForCausalLMEagle3"],
                "draft_vocab_size": draft_vocab,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux}}
        if target_hidden:
            conf["target_hidden_size"] = target_hidden
    (d / "config.json").write_text(json.dumps(conf))
    tensors = {
        "d2t": np.zeros(d2t_len if d2t_len is not None else draft_vocab, dtype=np.int64),
        "t2d": np.zeros(vocab, dtype=np.bool_),
        "fc.weight": np.zeros((hidden, len(aux) * th), dtype=dtype),
        "lm_head.weight": np.zeros((draft_vocab, hidden), dtype=dtype),
        "norm.weight": np.zeros(hidden, dtype=dtype),
        "layers.0.self_attn.q_proj.weight": np.zeros((hidden, 2 * hidden), dtype=dtype),
    }
    save_file(tensors, str(d / "model.safetensors"))
    return d
