"""evaluate never starts a load that cannot fit: the arithmetic from config.json, and the refusal.

The giant target is config-only (Kimi-K2.5's text config, no weights): the refusal must come from
the arithmetic before anything is loaded, through the real stage runner on this machine's real
free memory (this machine has far less than 4 TB).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import config as pconfig
from pipeline import fit, progress
from pipeline.errors import ConfigInvalid, TargetTooBig
from pipeline.stages.evaluate import check_fit
from tests.tiny_pipeline import pipeline_toml, tiny_dataset

REPO = Path(__file__).resolve().parents[2]

DEEPSEEK_V3 = {
    "hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 129280,
    "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "tie_word_embeddings": False, "model_type": "deepseek_v3",
}
# Kimi-K2.5: a multimodal wrapper whose text config is DeepSeek-V3-shaped with 384 experts.
KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
    "text_config": {**DEEPSEEK_V3, "vocab_size": 163840, "num_attention_heads": 64,
                    "num_key_value_heads": 64, "n_routed_experts": 384,
                    "first_k_dense_replace": 1},
}
LLAMA3_8B = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 128256,
             "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336}


def test_parameter_counts_match_the_published_sizes() -> None:
    # Published: DeepSeek-V3 671B (without its MTP layer), Kimi-K2 1.04T (text ~1.03T),
    # Llama-3-8B 8.03B, Mixtral-8x7B 46.7B.
    assert fit.parameter_count(DEEPSEEK_V3) / 1e9 == pytest.approx(671.0, rel=0.005)
    assert fit.parameter_count(KIMI_K25) / 1e12 == pytest.approx(1.03, rel=0.01)
    assert fit.parameter_count(LLAMA3_8B) / 1e9 == pytest.approx(8.03, rel=0.005)
    mixtral = {**LLAMA3_8B, "vocab_size": 32000, "num_local_experts": 8}
    assert fit.parameter_count(mixtral) / 1e9 == pytest.approx(46.7, rel=0.005)
    with pytest.raises(ValueError, match="lacks"):
        fit.parameter_count({"hidden_size": 8})


def test_tiny_llama_count_is_exact() -> None:
    # The count against a real transformers model of the same config (no biases in Llama).
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = {"hidden_size": 64, "num_hidden_layers": 3, "vocab_size": 101,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
           "tie_word_embeddings": False}
    model = LlamaForCausalLM(LlamaConfig(**cfg))
    assert fit.parameter_count(cfg) == sum(p.numel() for p in model.parameters())


def _giant_pipeline(tmp_path: Path) -> pconfig.PipelineConfig:
    (tmp_path / "kimi").mkdir()
    (tmp_path / "kimi" / "config.json").write_text(json.dumps(KIMI_K25))  # config only: no weights at all
    tiny_dataset(tmp_path)
    return pconfig.load(pipeline_toml(tmp_path, '[evaluate]\ndevice = "cpu"\n', model="kimi"))


def test_refusal_prints_the_arithmetic(tmp_path: Path) -> None:
    cfg = _giant_pipeline(tmp_path)
    eight_gpus = {"host": 2 << 40, "cuda:0": 141 << 30}
    with pytest.raises(TargetTooBig) as err:
        check_fit(cfg, "cuda", eight_gpus)
    msg = str(err.value)
    assert "1026.41B parameters x 2 bytes (bfloat16)" in msg
    assert "1.9 TiB of weights" in msg and "cuda:0 141.0 GiB free" in msg
    assert "does not fit" in msg and "evaluate.served_url" in msg
    assert isinstance(err.value, ConfigInvalid) and err.value.exit_code == 2
    # The same arithmetic against memory that holds it: no refusal.
    roomy = {"host": 4 << 40, "cuda:0": 4 << 40}
    assert check_fit(cfg, "cuda", roomy).fits


def test_stage_refuses_on_this_machine_before_loading(tmp_path: Path) -> None:
    """Through `python -m pipeline run`, on this machine's real free memory: exit 2, one error
    line with the arithmetic, and no evaluate output (the prepare/train inputs are faked
    complete only as far as the runner's manifest check needs: the refusal comes first)."""
    _giant_pipeline(tmp_path)
    from pipeline import manifest

    cfg = pconfig.load(tmp_path / "pipeline.toml")
    for stage in ("prepare", "extract", "vocab", "train"):
        manifest.write(cfg, stage, [], key="stand-in", summary={}, seconds=0.0)
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "evaluate", "--config", str(tmp_path / "pipeline.toml")],
         cwd=REPO, capture_output=True, text=True, timeout=300)
    events = [e for e in map(progress.parse, done.stdout.splitlines()) if e is not None]
    errors = [e for e in events if e["type"] == "error"]
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert errors and "1026.41B parameters x 4 bytes (float32)" in json.dumps(errors)
    assert "host" in json.dumps(errors) and "does not fit" in json.dumps(errors)
    assert not (manifest.stage_dir(cfg, "evaluate") / "acceptance.json").exists()


def test_an_unsizable_target_is_not_loaded(tmp_path: Path) -> None:
    cfg = _giant_pipeline(tmp_path)
    hf = json.loads((cfg.model_path / "config.json").read_text())
    del hf["text_config"]["num_attention_heads"]
    (cfg.model_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ConfigInvalid, match=r"cannot size the target .* so it is not loaded"):
        check_fit(cfg, "cpu", {"host": 1 << 50})
