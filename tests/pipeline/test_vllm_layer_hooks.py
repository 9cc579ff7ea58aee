"""The parts of the vLLM hook capture that need no engine (the engine test is
tests/pipeline/test_extract_vllm032.py): finding the decoder layers under the wrappers vLLM builds, the
state a layer's output stands for, how samples are cut into batches in flight, and the stored
dtype the size projection counts. Real torch modules built here, no vLLM needed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from pipeline import config as pconfig
from pipeline import state_size
from pipeline.stages.extract import _batches
from pipeline.vllm_layer_hooks import LayerCaptureExtension, _layer_output, find_decoder_layers
from tests.tiny_pipeline import pipeline_toml, tiny_dataset, tiny_model


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
    tiny_model(tmp_path)
    tiny_dataset(tmp_path)
    for backend, dtype, fmt, size in (("hf", "float32", "0.9", 2), ("vllm", "float32", "0.3", 2),
                                      ("vllm", "float32", "0.9", 4),
                                      ("vllm", "bfloat16", "0.9", 2)):
        cfg = pconfig.load(pipeline_toml(tmp_path, extract=f'backend = "{backend}"\ndtype = "{dtype}"\n'))
        assert state_size.bytes_per_token(cfg, fmt) == 4 * 64 * size + 16, (backend, dtype, fmt)
        assert state_size.bytes_per_token(cfg) == 4 * 64 * 2 + 16


# -- the worker extension driven step by step, without an engine ---------------------------------
# A test double of the parts of vLLM's V1 worker the extension reads (model_runner.get_model,
# model_config, input_batch.req_ids/num_reqs, execute_model(scheduler_output)) and of the
# scheduler output's fields (scheduled_new_reqs, scheduled_cached_reqs, num_scheduled_tokens),
# named as in vLLM 0.32; the decoder layers are real torch modules returning (hidden, residual)
# as vLLM's do. What it stands in for (the engine) is exercised by tests/engine_capture_stress.py
# (figures in docs/measurements.md).
class _AddNorm(nn.Module):
    """A decoder layer's shape: (hidden, residual) out, their sum the residual stream."""

    def __init__(self, k: float) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * self.k, x


class _Runner:
    def __init__(self, layers: int) -> None:
        self.model = _CausalLM(layers)
        self.model.model.layers = nn.ModuleList(_AddNorm(float(i + 2)) for i in range(layers))
        self.model_config = SimpleNamespace(hf_text_config=SimpleNamespace(
            num_hidden_layers=layers))
        self.input_batch = SimpleNamespace(req_ids=[], num_reqs=0)
        self.rows: torch.Tensor = torch.empty(0)

    def get_model(self) -> nn.Module:
        return self.model

    def execute_model(self, sched: Any) -> None:
        x = self.rows
        for layer in self.model.model.layers:
            h, r = layer(x)
            x = h + r


class _Worker(LayerCaptureExtension):
    def __init__(self, rank: int, layers: int = 3) -> None:
        self.rank = rank
        self.model_runner = _Runner(layers)

    def step(self, order: list[tuple[str, list[float]]], new: dict[str, tuple[int, list[int]]],
             cached: dict[str, int]) -> None:
        """One scheduled step: `order` = (request, its rows' input values) in batch order."""
        runner = self.model_runner
        runner.input_batch = SimpleNamespace(req_ids=[r for r, _ in order], num_reqs=len(order))
        runner.rows = torch.tensor([v for _, vals in order for v in vals]).unsqueeze(1)
        sched = SimpleNamespace(
            scheduled_new_reqs=[SimpleNamespace(req_id=r, num_computed_tokens=s,
                                                prompt_token_ids=p) for r, (s, p) in new.items()],
            scheduled_cached_reqs=SimpleNamespace(req_ids=list(cached),
                                                  num_computed_tokens=list(cached.values())),
            num_scheduled_tokens={r: len(vals) for r, vals in order},
            total_num_scheduled_tokens=sum(len(vals) for _, vals in order))
        runner.execute_model(sched)


def _layer_out(values: list[float], layer: int) -> list[float]:
    """What the chain of _AddNorm layers gives after layer `layer` (each: x * (k + 1))."""
    out = list(values)
    for k in range(layer + 1):
        out = [v * (k + 3) for v in out]
    return out


def _taken(w: _Worker) -> dict[tuple[int, ...], list[list[float]]]:
    got = {}
    for prompt, wire in w._capture_take():
        got[tuple(prompt)] = [torch.frombuffer(bytearray(raw), dtype=getattr(torch, dt))
                              .reshape(shape)[:, 0].tolist() for dt, shape, raw in wire]
    return got


def test_only_tp_rank_0_hooks_and_captures() -> None:
    for rank in (1, 3):
        w = _Worker(rank)
        original = w.model_runner.execute_model
        info = w._capture_setup([0, 2])
        assert info == {"path": "model.layers", "num_layers": 3, "capturing": False,
                        "not_built": []}
        assert w.model_runner.execute_model == original  # not wrapped
        assert all(not m._forward_hooks for m in w.model_runner.model.model.layers)
        w.step([("a", [1.0, 2.0])], {"a": (0, [5, 6])}, {})
        assert w._capture_take() == [] and w._capture_restarts() == 0
    w = _Worker(0)
    assert w._capture_setup([0, 2])["capturing"] is True
    w.step([("a", [1.0, 2.0])], {"a": (0, [5, 6])}, {})
    assert _taken(w) == {(5, 6): [_layer_out([1.0, 2.0], 0), _layer_out([1.0, 2.0], 2)]}


def test_a_preempted_request_recomputed_from_zero_keeps_only_the_recompute() -> None:
    """vLLM's recompute preemption: a request's blocks are freed mid-prefill, its computed count
    set to 0, and it comes back among the cached requests from token 0. The rows of its first
    attempt are dropped (values 100+ here, so a leftover would show), chunks re-tiled."""
    w = _Worker(0)
    w._capture_setup([1])
    a, b = [5, 6, 7, 8, 9], [1, 2, 3]
    w.step([("a", [100.0, 101.0]), ("b", [1.0, 2.0])], {"a": (0, a), "b": (0, b)}, {})
    w.step([("b", [3.0])], {}, {"b": 2})  # "a" preempted: not scheduled
    w.step([("a", [10.0, 11.0, 12.0])], {}, {"a": 0})  # resumed, recomputed from token 0
    w.step([("a", [13.0, 14.0])], {}, {"a": 3})
    assert w._capture_restarts() == 1
    assert _taken(w) == {tuple(a): [_layer_out([10.0, 11.0, 12.0, 13.0, 14.0], 1)],
                         tuple(b): [_layer_out([1.0, 2.0, 3.0], 1)]}
    assert w._capture_take() == []  # handed over once


def test_a_paused_capture_runs_plain_steps_and_resumes() -> None:
    """benchmarks/extract_throughput.py's baseline: while paused, steps run as vLLM's own (the
    layers still compute, nothing is kept), and capture resumes where it was."""
    w = _Worker(0)
    w._capture_setup([1])
    w._capture_pause(True)
    w.step([("a", [1.0, 2.0])], {"a": (0, [5, 6])}, {})
    assert w._capture_take() == []
    w._capture_pause(False)
    w.step([("b", [3.0])], {"b": (0, [7])}, {})
    assert _taken(w) == {(7,): [_layer_out([3.0], 1)]}
