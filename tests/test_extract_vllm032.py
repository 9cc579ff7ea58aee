"""WORK IN PROGRESS, not collected (not test_*): fails today at the connector's copy-done poll
(see pipeline/stages/extract.py); rename to test_extract_vllm032.py once it passes.

Captured states are right on vLLM 0.32 + speculators 0.9 (the `vllm032` box environment):
the pipeline's `vllm` extract backend there (the extract_hidden_states server plus
`speculators generate-offline-data`, 32 requests in flight) writes, for every sample, the states
the `hf` backend computes at the same layer ids.

The prefill chunk is forced down to 8 tokens (extract.max_num_batched_tokens), below the longer
samples, and all samples are in flight at once: chunked prefill and batches of mixed lengths are
both exercised. float32 on both sides; the CPU attention kernel and SDPA sum in different orders,
hence the tolerance.

One engine start; the demo target of the session's engine fixture (its server stopped first).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.engine_fixture import EngineBox

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CHUNK = 8
ATOL = 1e-4
RTOL = 1e-4


# vLLM's ExampleHiddenStatesConnector orders its copy with CUDA streams and events: on this
# CPU-only torch they are the test double of tests/doubles/cpu_streams (a sitecustomize).
STREAMS_DOUBLE = REPO / "tests" / "doubles" / "cpu_streams"


def _run(python: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(STREAMS_DOUBLE), str(REPO)])
    env = {**os.environ, "PYTHONPATH": path, "VLLM_CPU_KVCACHE_SPACE": "1",
           "TQDM_DISABLE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    return subprocess.run([str(python), *args], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def test_vllm_backend_on_032_equals_hf_on_every_sample(engine_box: EngineBox,
                                                          tmp_path: Path) -> None:
    engine_box.release()  # one engine at a time
    demo = engine_box.demo_dir
    text = (demo / "pipeline.toml").read_text()
    for old, new in (('output_dir = "out"', f'output_dir = "{tmp_path / "out"}"'),
                     ('model = "target"', f'model = "{demo / "target"}"'),
                     ('dataset = "conversations.jsonl"',
                      f'dataset = "{demo / "conversations.jsonl"}"'),
                     ('backend = "hf"', 'backend = "vllm"'),
                     ("reserve_bytes = 0", f"reserve_bytes = 0\nmax_num_batched_tokens = {CHUNK}"),
                     ("eval_samples = 8", "eval_samples = 8\nsamples = 16")):
        assert old in text, old
        text = text.replace(old, new)
    cfg = tmp_path / "pipeline.toml"
    cfg.write_text(text)

    for stage in ("prepare", "extract"):
        done = _run(engine_box.python, "-m", "pipeline", stage, "--config", str(cfg),
                    timeout=1200)
        server_log = tmp_path / "out" / "extract" / "vllm_server.log"
        tail = server_log.read_text()[-3000:] if server_log.exists() else ""
        assert done.returncode == 0, (done.stderr[-3000:], tail)
    meta = json.loads((tmp_path / "out" / "extract" / "meta.json").read_text())
    assert meta["format"] == "0.9" and meta["backend"] == "vllm"

    out = tmp_path / "compare.json"
    done = _run(engine_box.python, "-m", "tests.engine_compare09", "--config", str(cfg),
                "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    samples = got["samples"]
    assert got["layer_ids"] == [1, 2, 3, 4] and len(samples) == 16
    lengths = [s["len"] for s in samples]
    assert min(lengths) > CHUNK and len(set(lengths)) > 1  # chunked prefill, mixed lengths
    for s in samples:
        assert s["ids_equal"] and s["rows"] == s["len"], s
        for lid, diff in s["max_abs_diff"].items():
            assert s["max_abs"][lid] > 0.01  # a real state, not zeros
            assert diff is not None and diff <= ATOL + RTOL * s["max_abs"][lid], (s, lid)
