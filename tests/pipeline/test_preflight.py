"""Extraction preflight: GPUs held by another process (the serving vLLM) and a
tensor_parallel_size too small for the weights are refused, with who holds what and the fix.
NVML is the test double tests/doubles/pynvml.py (no GPU here); the processes are real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline import preflight
from pipeline.errors import PipelineError

DOUBLES = Path(__file__).parents[1] / "doubles"
GIB = 2**30


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    monkeypatch.syspath_prepend(str(DOUBLES))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    state = tmp_path / "nvml.json"
    monkeypatch.setenv("PYNVML_DOUBLE_STATE", str(state))

    def set_devices(devices: list[dict]) -> None:
        state.write_text(json.dumps({"devices": devices, "init_error": None}))
    return set_devices


def _dev(procs: list[dict], total: int = 141 * GIB) -> dict:
    return {"name": "NVIDIA H200", "util": 0, "mem_used": sum(p["used"] for p in procs),
            "mem_total": total, "procs": procs}


def _model(tmp_path: Path, size: int) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": size}, "weight_map": {}}))
    return d


def _wait_for_exec(pid: int, word: bytes) -> None:
    """Until /proc/PID/cmdline holds `word`: right after Popen returns the child may not have
    exec'd yet, and the preflight would read the forking parent's (or an empty) command line —
    the test failed so on a loaded machine (issue 33)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    for _ in range(2000):  # up to ~20 s on a very loaded machine; normally one or two reads
        if word in cmdline.read_bytes():
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} never exec'd its command: {cmdline.read_bytes()!r}")


def test_gpu_held_by_a_serving_process_is_refused_with_its_pid_and_command(
        nvml, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                               "vllm-serve-standin"])
    try:
        _wait_for_exec(server.pid, b"vllm-serve-standin")
        nvml([_dev([{"pid": server.pid, "used": 120 * GIB}]), _dev([])])
        with pytest.raises(PipelineError) as err:
            preflight.check(_model(tmp_path, 10 * GIB), 1)
        msg = str(err.value)
        assert f"GPU 0: pid {server.pid} holds 120.0 GiB" in msg
        assert "vllm-serve-standin" in msg and f"kill {server.pid}" in msg
        # The free GPU is fine once CUDA_VISIBLE_DEVICES points at it.
        os.environ["CUDA_VISIBLE_DEVICES"] = "1"
        try:
            notes = preflight.check(tmp_path / "model", 1)
        finally:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        assert notes and "free" in notes[0]
    finally:
        server.kill()
        server.wait()


def test_small_context_of_our_own_or_others_is_not_a_refusal(nvml, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    nvml([_dev([{"pid": 1, "used": GIB // 2}, {"pid": os.getpid(), "used": 50 * GIB}])])
    assert preflight.check(_model(tmp_path, GIB), 1)


def test_tensor_parallel_too_small_for_the_weights_names_the_size_that_fits(
        nvml, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    nvml([_dev([]) for _ in range(8)])
    model = _model(tmp_path, 600 * GIB)  # ~ Kimi-K2.5 at int4/fp8 scale
    with pytest.raises(PipelineError, match=r"set extract.tensor_parallel_size = 8"):
        preflight.check(model, 2)
    assert preflight.check(model, 8)
    with pytest.raises(PipelineError, match=r"tensor_parallel_size = 16 but 8 GPU"):
        preflight.check(model, 16)


def test_without_nvml_the_gpu_part_says_why_it_did_not_run(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as when not installed
    notes = preflight.check(_model(tmp_path, GIB), 1)
    assert notes == ["GPU preflight skipped: pynvml (nvidia-ml-py) is not installed"]
