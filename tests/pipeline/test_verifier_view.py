"""speculators 0.3.0's draft model on wrapped targets, through the pipeline's verifier view: no
edit to the installed speculators, no trust_remote_code prompt, `text_config` and
`language_model.`-prefixed weights handled. Real speculators 0.3.0, real transformers, tiny
models built from config."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from speculators.utils.loading import load_model_layers
from transformers import AutoConfig

from pipeline.verifier_view import EMBED, LM_HEAD, needs_view, verifier_dir
from tests.tiny_targets import HIDDEN, build_llava_next


def _kimi_shaped(d: Path) -> dict[str, torch.Tensor]:
    """A remote-code checkpoint laid out like Kimi-K2.5: auto_map, hidden_size only in
    text_config, weights under language_model."""
    d.mkdir(parents=True)
    vocab, hidden = 40, 32
    cfg = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
           "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                        "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
           "text_config": {"model_type": "deepseek_v3", "hidden_size": hidden,
                           "vocab_size": vocab, "num_hidden_layers": 2, "pad_token_id": 0},
           "vision_config": {"hidden_size": 16}}
    (d / "config.json").write_text(json.dumps(cfg))
    w = {"language_model.model.embed_tokens.weight": torch.randn(vocab, hidden),
         "language_model.lm_head.weight": torch.randn(vocab, hidden),
         "vision_tower.patch_embed.weight": torch.randn(16, 3),
         "vision_tower.encoder.embed_tokens.weight": torch.randn(5, 16)}
    save_file(w, str(d / "model.safetensors"))
    return w


def test_kimi_shaped_remote_code_target_gets_a_plain_view(tmp_path: Path) -> None:
    model = tmp_path / "kimi"
    w = _kimi_shaped(model)
    assert needs_view(model)
    view = verifier_dir(model, tmp_path / "out")
    assert view != model
    # What speculators 0.3's _setup_embeddings_and_lm_heads does, verbatim:
    conf = AutoConfig.from_pretrained(str(view))  # no trust_remote_code, no prompt
    assert (conf.hidden_size, conf.vocab_size) == (32, 40)
    got = load_model_layers([EMBED, LM_HEAD], str(view))
    assert torch.equal(got[EMBED], w["language_model.model.embed_tokens.weight"])
    assert torch.equal(got[LM_HEAD], w["language_model.lm_head.weight"])
    assert verifier_dir(model, tmp_path / "out") == view  # built once


def test_plain_text_model_is_its_own_verifier(tmp_path: Path) -> None:
    d = tmp_path / "plain"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8,
                                               "vocab_size": 4}))
    save_file({EMBED: torch.zeros(4, 8), LM_HEAD: torch.zeros(4, 8)}, str(d / "model.safetensors"))
    assert not needs_view(d)
    assert verifier_dir(d, tmp_path / "out") == d


def test_builtin_llava_wrapper_view_matches_the_model(tmp_path: Path) -> None:
    model = build_llava_next(tmp_path / "llava")
    view = verifier_dir(model, tmp_path / "out")
    assert view != model
    conf = AutoConfig.from_pretrained(str(view))
    assert conf.model_type == "llama" and conf.hidden_size == HIDDEN
    orig = load_file(str(model / "model.safetensors"))
    got = load_model_layers([EMBED, LM_HEAD], str(view))
    # transformers saves the wrapper under its legacy names (language_model.model.*)
    embed = next(k for k in orig if k.endswith("embed_tokens.weight") and "language_model" in k)
    head = next(k for k in orig if k.endswith("lm_head.weight"))
    assert embed != EMBED
    assert torch.equal(got[EMBED], orig[embed])
    assert torch.equal(got[LM_HEAD], orig[head])
