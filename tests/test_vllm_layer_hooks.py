"""The parts of the vLLM hook capture that need no engine (the engine test is
tests/test_extract_vllm032.py): finding the decoder layers under the wrappers vLLM builds, the
state a layer's output stands for, how samples are cut into batches in flight, and the stored
dtype the size projection counts. Real torch modules built here, no vLLM needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from pipeline import config as pconfig
from pipeline.stages.extract import _batches
from pipeline.vllm_layer_hooks import _layer_output, find_decoder_layers


class _Decoder(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(n))


class _CausalLM(nn.Module):  # vLLM's LlamaForCausalLM / DeepseekV2ForCausalLM shape
    def __init__(self, n: int) -> None:
        super().__init__()
        self.model = _Decoder(n)


class _Wrapper(nn.Module):  # Kimi-K2.5 / Llava: the text model under language_model
    def __init__(self, n: int) -> None:
        super().__init__()
        self.vision_tower = _Decoder(n)  # same count on purpose: must not be picked
        self.language_model = _CausalLM(n)

    def get_language_model(self) -> nn.Module:
        return self.language_model


class _Odd(nn.Module):  # layers under an unusual path: found by the scan
    def __init__(self, n: int) -> None:
        super().__init__()
        self.backbone = nn.Module()
        self.backbone.blocks = nn.Module()
        self.backbone.blocks.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(n))


def test_decoder_layers_under_each_wrapper() -> None:
    plain = _CausalLM(3)
    assert find_decoder_layers(plain, 3) == ("model.layers", plain.model.layers)
    wrapped = _Wrapper(3)
    path, layers = find_decoder_layers(wrapped, 3)
    assert path == "get_language_model().model.layers"
    assert layers is wrapped.language_model.model.layers
    odd = _Odd(2)
    assert find_decoder_layers(odd, 2) == ("backbone.blocks.layers", odd.backbone.blocks.layers)


def test_decoder_layers_refused_when_unclear() -> None:
    with pytest.raises(RuntimeError, match=r"4 expected.*model\.layers \(3\)"):
        find_decoder_layers(_CausalLM(3), 4)
    two = nn.Module()
    two.a = _Decoder(2)
    two.b = _Decoder(2)
    with pytest.raises(RuntimeError, match="cannot tell the decoder layers"):
        find_decoder_layers(two, 2)


def test_layer_output_is_the_residual_stream() -> None:
    h, r = torch.randn(5, 4), torch.randn(5, 4)
    assert torch.equal(_layer_output((h, r)), h + r)
    alone = _layer_output(h)  # a layer that returns the stream itself: a copy of it
    assert torch.equal(alone, h) and alone.data_ptr() != h.data_ptr()
    assert torch.equal(_layer_output((h, None)), h)


def test_batches_respect_the_token_budget_and_order() -> None:
    samples = [{"input_ids": [0] * n} for n in (5, 5, 5, 12, 1, 3)]
    assert _batches(samples, [0, 1, 2, 3, 4, 5], 10) == [[0, 1], [2], [3], [4, 5]]
    assert _batches(samples, [2, 5], 10) == [[2, 5]]  # only what is left to do
    assert _batches(samples, [], 10) == []


def test_size_projection_counts_the_stored_dtype(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(
        {"num_hidden_layers": 8, "hidden_size": 64, "vocab_size": 100}))
    (tmp_path / "conv.jsonl").write_text(json.dumps({"conversations": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) + "\n")
    for backend, dtype, fmt, size in (("hf", "float32", "0.9", 2), ("vllm", "float32", "0.3", 2),
                                      ("vllm", "float32", "0.9", 4),
                                      ("vllm", "bfloat16", "0.9", 2)):
        (tmp_path / "pipeline.toml").write_text(
            f'output_dir = "out"\n[target]\nmodel = "model"\n[data]\ndataset = "conv.jsonl"\n'
            f'[extract]\nbackend = "{backend}"\ndtype = "{dtype}"\nlayer_ids = [2, 4, 5]\n'
            "[vocab]\ndraft_vocab_size = 50\n")
        cfg = pconfig.load(tmp_path / "pipeline.toml")
        assert pconfig.bytes_per_token(cfg, fmt) == 4 * 64 * size + 16, (backend, dtype, fmt)
        assert pconfig.bytes_per_token(cfg) == 4 * 64 * 2 + 16
