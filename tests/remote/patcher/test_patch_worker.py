"""The patched custom_worker.py, imported and run: decoder resolution on Kimi-, Llama- and
layer-less models, and hidden states captured on a tiny real Llama equal HF transformers'."""

from __future__ import annotations

import itertools
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from remote.patcher.plan import compose, recipes_for
from remote.patcher.recipes import CUSTOM_WORKER
from tests import vllm_doubles as vd
from tests.patchbox import wheel_file

N_LAYERS = 4
_count = itertools.count()


@pytest.fixture
def vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, module in vd.vllm_modules().items():
        monkeypatch.setitem(sys.modules, name, module)


def _worker(tmp_path: Path, recipes: list[str] | None) -> types.ModuleType:
    original = wheel_file(f"speculators/{CUSTOM_WORKER}").read_text()
    chosen = [r for r in recipes_for("speculators")[CUSTOM_WORKER]
              if recipes is None or r.name in recipes]
    path = tmp_path / f"custom_worker_{next(_count)}.py"
    path.write_text(compose(original, chosen))
    return vd.load_worker(path, path.stem)


@pytest.fixture
def patched(tmp_path: Path, vllm: None) -> types.ModuleType:
    return _worker(tmp_path, None)


@pytest.fixture
def original(tmp_path: Path, vllm: None) -> types.ModuleType:
    return _worker(tmp_path, [])


@pytest.fixture(scope="module")
def hf_llama() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=101, hidden_size=32, intermediate_size=64, num_hidden_layers=N_LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, attn_implementation="sdpa",
    )
    model = transformers.LlamaForCausalLM(config).eval()
    # Random init keeps the norm weights at 1; perturb them so pre- and post-norm differ clearly.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model


def _setup(module: types.ModuleType, model: Any, layers: list[int]) -> Any:
    ext = module.HiddenStatesWorkerExtension()
    ext.model_runner = types.SimpleNamespace(model=model)
    ext._setup_hidden_states_capture(layers)
    return ext


def _ids() -> Any:
    return torch.tensor([5, 17, 3, 99, 42, 8, 61, 23, 7, 1])


def test_kimi_shaped_model_resolves_to_language_model_decoder(patched: types.ModuleType,
                                                               hf_llama: Any) -> None:
    for with_getter in (True, False):
        decoder = vd.VllmStyleDecoder(hf_llama)
        kimi = vd.KimiK25ForConditionalGeneration(decoder, with_getter=with_getter)
        assert patched._resolve_text_decoder(kimi) is decoder
        _setup(patched, kimi, [1])
        assert "forward" in vars(decoder) and decoder._extension is not None


def test_original_worker_refuses_kimi_shaped_model(original: types.ModuleType,
                                                    hf_llama: Any) -> None:
    kimi = vd.KimiK25ForConditionalGeneration(vd.VllmStyleDecoder(hf_llama))
    with pytest.raises(ValueError, match="does not support hidden state extraction"):
        _setup(original, kimi, [1])


def test_llama_shaped_model_resolves_to_model_model(patched: types.ModuleType,
                                                    hf_llama: Any) -> None:
    decoder = vd.VllmStyleDecoder(hf_llama)
    assert patched._resolve_text_decoder(vd.LlamaForCausalLM(decoder)) is decoder
    assert patched._resolve_text_decoder(decoder) is decoder  # the decoder itself has layers


def test_model_without_layers_fails_listing_paths(patched: types.ModuleType) -> None:
    with pytest.raises(ValueError) as info:
        _setup(patched, vd.NoLayersModel(), [1])
    message = str(info.value)
    assert "NoLayersModel does not support hidden state extraction" in message
    for path in ("model, ", "model.get_language_model().model", "model.language_model.model",
                 "model.model"):
        assert path in message


def test_explicit_path_from_the_structure_probe(patched: types.ModuleType, hf_llama: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = vd.VllmStyleDecoder(hf_llama)
    kimi = vd.KimiK25ForConditionalGeneration(decoder, with_getter=False)
    monkeypatch.setenv("EAGLE3_TEXT_DECODER_PATH", "language_model.model")
    assert patched._resolve_text_decoder(kimi) is decoder
    # The model probe's layers_path names the ModuleList itself.
    monkeypatch.setenv("EAGLE3_TEXT_DECODER_PATH", "language_model.model.layers")
    assert patched._resolve_text_decoder(kimi) is decoder
    monkeypatch.setenv("EAGLE3_TEXT_DECODER_PATH", "layers")
    assert patched._resolve_text_decoder(decoder) is decoder
    monkeypatch.setenv("EAGLE3_TEXT_DECODER_PATH", "vision_tower")
    with pytest.raises(ValueError, match=r"at model\.vision_tower$"):
        patched._resolve_text_decoder(kimi)


def _capture(module: types.ModuleType, model: Any, decoder: Any, layers: list[int]) -> Any:
    ext = _setup(module, model, layers)
    ids = _ids()
    with torch.no_grad():
        final = decoder(ids, torch.arange(len(ids)))
    return final, ext._get_captured_states()


def test_captured_states_equal_hf_output_hidden_states(patched: types.ModuleType,
                                                       hf_llama: Any) -> None:
    """State after layer L before the final norm = HF hidden_states[L + 1] for L < N-1; for the
    last layer HF's last entry is post-norm, so its pre-norm input is taken with a hook."""
    decoder = vd.VllmStyleDecoder(hf_llama)  # 0.16 naming: embed_input_ids only
    layers = [1, N_LAYERS // 2, N_LAYERS - 1]
    final, captured = _capture(patched, vd.KimiK25ForConditionalGeneration(decoder), decoder,
                               layers)

    pre_norm: list[Any] = []
    hook = hf_llama.model.norm.register_forward_pre_hook(lambda m, a: pre_norm.append(a[0]))
    try:
        with torch.no_grad():
            out = hf_llama(_ids().unsqueeze(0), output_hidden_states=True)
    finally:
        hook.remove()
    hs = out.hidden_states
    assert len(hs) == N_LAYERS + 1 and len(captured) == len(layers)
    for got, layer in zip(captured, layers, strict=True):
        want = pre_norm[0][0] if layer == N_LAYERS - 1 else hs[layer + 1][0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # The final norm really matters: HF's last entry is not the last layer's pre-norm output.
    assert not torch.allclose(captured[-1], hs[N_LAYERS][0], atol=1e-3)
    torch.testing.assert_close(final, hs[N_LAYERS][0], rtol=1e-5, atol=1e-5)


def test_patched_capture_is_identical_to_original_on_llama(original: types.ModuleType,
                                                          patched: types.ModuleType,
                                                          hf_llama: Any) -> None:
    """For a model that already worked (Llama on vLLM <= 0.15: get_input_embeddings) the
    patched worker captures bit-identical tensors."""
    layers = [0, 2, 3]
    results = []
    for module in (original, patched):
        decoder = vd.VllmStyleDecoder(hf_llama, embed_name="get_input_embeddings")
        results.append(_capture(module, vd.LlamaForCausalLM(decoder), decoder, layers))
    (final_a, cap_a), (final_b, cap_b) = results
    assert torch.equal(final_a, final_b)
    assert all(torch.equal(a, b) for a, b in zip(cap_a, cap_b, strict=True))


def test_original_forward_breaks_on_vllm_016_naming_patched_does_not(
        original: types.ModuleType, patched: types.ModuleType, hf_llama: Any) -> None:
    decoder = vd.VllmStyleDecoder(hf_llama)  # embed_input_ids only, as in vLLM 0.16
    with pytest.raises(AttributeError, match="get_input_embeddings"):
        _capture(original, vd.LlamaForCausalLM(decoder), decoder, [1])
    decoder = vd.VllmStyleDecoder(hf_llama)
    _, captured = _capture(patched, vd.LlamaForCausalLM(decoder), decoder, [1])
    assert captured is not None and captured[0].shape == (len(_ids()), 32)
