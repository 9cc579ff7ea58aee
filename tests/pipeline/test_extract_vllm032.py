"""Captured states are right on vLLM 0.32 + speculators 0.9 (the `vllm032` box environment, a
CPU build): the pipeline's `vllm` extract backend, run as a user runs it (`python -m pipeline
prepare|extract|vocab|train` with the box's python), writes for every sample the states the `hf`
backend computes at the same layer ids, and speculators 0.9's trainer trains from those files.

Without CUDA the backend goes through our worker extension's layer hooks
(pipeline.vllm_layer_capture; speculators 0.9's own connector route is CUDA-only). The prefill
chunk is forced down to 8 tokens (extract.max_num_batched_tokens), below every sample's length,
which also caps vLLM at 8 requests per step: all 16 samples go to the engine in one batch, so
chunked prefill and requests of mixed lengths in flight together are both exercised.
float32 engine, float32 files (the engine's dtype, as vLLM's connector writes them), float32
`hf`; the CPU attention kernel and SDPA sum in different orders, hence the tolerance.

Tensor parallel 2 (the real box runs 8): the engine has two workers and only rank 0 captures
(pipeline.vllm_layer_hooks), so this is what TP 1 covered plus the rank rule. On this CPU TP 2
needs VLLM_CPU_OMP_THREADS_BIND="0|1" (one core per worker). Preemption (a KV cache too small for
the requests in flight) needs engine settings a pipeline config does not have: it is checked by
hand (tests/engine_capture_stress.py, figures in docs/measurements.md).

One engine start; the demo target of the session's engine fixture (its server stopped first).
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from tests.box_env import run_env
from tests.engine_fixture import EngineBox

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # three stage runs, each timed

REPO = Path(__file__).resolve().parents[2]
CHUNK = 8
TP = 2
ATOL = 1e-5
RTOL = 1e-5  # of the largest magnitude of that layer's state in the sample


def _run(python: Path, *args: str, timeout: float,
         tp: int = 1) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *args], cwd=REPO, env=run_env(tp=tp), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def _events(text: str) -> list[dict[str, object]]:
    return [json.loads(ln.split(" ", 1)[1]) for ln in text.splitlines()
            if ln.startswith("@@eagle3 ")]


def test_vllm_backend_on_032_at_tp2_equals_hf_on_every_sample(engine_box: EngineBox,
                                                                 tmp_path: Path) -> None:
    extract_compare_train(engine_box, tmp_path, TP)


def extract_compare_train(engine_box: EngineBox, tmp_path: Path, tp: int) -> None:
    engine_box.release()  # one engine at a time
    cfg = engine_box.demo_config(
        tmp_path / "pipeline.toml", ('backend = "hf"', 'backend = "vllm"'),
        ("reserve_bytes = 0", f"reserve_bytes = 0\nmax_num_batched_tokens = {CHUNK}\ntensor_parallel_size = {tp}"),
        ("eval_samples = 8", "eval_samples = 8\nsamples = 16"), ("epochs = 8", "epochs = 1"),
        ("total_seq_len = 512", "total_seq_len = 4096"))  # one train step

    out: dict[str, subprocess.CompletedProcess[str]] = {}
    for stage in ("prepare", "extract"):
        out[stage] = done = _run(engine_box.python, "-m", "pipeline", stage, "--config",
                                 str(cfg), timeout=900, tp=tp)
        assert done.returncode == 0, (stage, done.stderr[-3000:], done.stdout[-3000:])
    routes = [e for e in _events(out["extract"].stdout + out["extract"].stderr)
              if e.get("route")]
    assert [e["route"] for e in routes] == ["hooks"], routes  # no CUDA here: said in the log
    setups = [e for e in _events(out["extract"].stdout + out["extract"].stderr)
              if "capturing_ranks" in e]
    assert [(e["workers"], e["capturing_ranks"]) for e in setups] == [(tp, [0])], setups
    meta = json.loads((tmp_path / "out" / "extract" / "meta.json").read_text())
    assert meta["format"] == "0.9" and meta["backend"] == "vllm"
    # the writer pool's figures on the progress line (pipeline/write_pool.py), to the last one
    progress = [e for e in _events(out["extract"].stdout) if e.get("type") == "progress"]
    tokens = progress[-1]["tokens"] if progress else None
    assert progress and progress[-1]["done"] == 16, progress
    assert isinstance(tokens, int) and tokens > 16 * CHUNK, progress
    assert all(isinstance(e["writer_waits"], int) for e in progress), progress

    compare = tmp_path / "compare.json"
    done = _run(engine_box.python, "-m", "tests.engine_compare09", "--config", str(cfg),
                "--out", str(compare), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(compare.read_text())
    samples = got["samples"]
    assert got["layer_ids"] == [1, 2, 3, 4] and len(samples) == 16
    lengths = [s["len"] for s in samples]
    assert min(lengths) > CHUNK and len(set(lengths)) > 1, lengths  # chunked, mixed lengths
    for s in samples:
        assert s["ids_equal"] and s["rows"] == s["len"] and s["dtype"] == "torch.float32", s
        for lid, diff in s["max_abs_diff"].items():
            assert s["max_abs"][lid] > 0.01  # a real state, not zeros
            assert diff is not None and diff <= ATOL + RTOL * s["max_abs"][lid], (s, lid)

    # speculators 0.9's trainer reads those files (on_missing = raise: it never generates).
    for stage in ("vocab", "train"):
        done = _run(engine_box.python, "-m", "pipeline", stage, "--config", str(cfg),
                    timeout=600)
        assert done.returncode == 0, (stage, done.stderr[-3000:], done.stdout[-3000:])
        out[stage] = done
    losses = [float(str(e["loss"])) for e in _events(out["train"].stdout + out["train"].stderr)
              if e.get("stage") == "train" and e.get("loss") is not None]
    assert losses and all(math.isfinite(x) for x in losses), losses
    ckpt = tmp_path / "out" / "train" / "checkpoint"
    assert (ckpt / "model.safetensors").stat().st_size > 0
    assert json.loads((ckpt / "config.json").read_text())["eagle3_console"]["format"] == "0.9"
