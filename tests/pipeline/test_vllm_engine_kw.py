"""The capture engine's KV cache on a box without CUDA: without VLLM_CPU_KVCACHE_SPACE vLLM's
CPU worker wants 0.92 x total RAM available at start (a suite run failed so: 17.8 of 23.5 GiB
available), so the capture defaults it to 1 GiB, keeps a user's, and the servers the pipeline
starts (pipeline.serve, the extraction server) take that same default."""

from __future__ import annotations

import pytest

from pipeline import vllm_engine_kw


def test_cpu_box_gets_a_one_gib_cache_and_a_users_setting_is_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_engine_kw, "_has_cuda", lambda: False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    vllm_engine_kw.capture_engine_kwargs("/nonexistent", extension="x", tensor_parallel_size=1,
                                         dtype="bfloat16", max_model_len=64,
                                         trust_remote_code=False)
    import os

    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "1"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    vllm_engine_kw.default_cpu_kv_cache()
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "4"


def test_a_cuda_box_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_engine_kw, "_has_cuda", lambda: True)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    vllm_engine_kw.default_cpu_kv_cache()
    import os

    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ


def test_servers_take_the_one_default_and_keep_a_users(monkeypatch: pytest.MonkeyPatch) -> None:
    """pipeline.serve's server (and the extraction server) start vLLM as their own process:
    their default is this module's, not a copy that could drift from the capture engines'."""
    from pipeline import serve

    monkeypatch.setattr(vllm_engine_kw, "CPU_KV_CACHE_GIB", "7")
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert serve.server_env()["VLLM_CPU_KVCACHE_SPACE"] == "7"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    assert serve.server_env()["VLLM_CPU_KVCACHE_SPACE"] == "4"
