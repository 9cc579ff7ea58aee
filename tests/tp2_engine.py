"""A real vLLM 0.32 OpenAI server, tensor parallel 2 on this CPU, with its torch profiler on
and n-gram speculation (so its spec-decode counters move without a trained head).

One per test session (it takes minutes to start on the shared cores). The target is a tiny
Llama built here from a config (head_dim 32: vLLM's CPU attention refuses 16; random weights,
no hub), with the demo's word-level tokenizer. The profiler writes every worker's trace and
the frontend's beside them into `profiler_dir`, as on a GPU box.

A missing box environment or an engine that does not come up fails the test; it never skips.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.box_env import ensure
from tests.sshd_harness import free_port

REPO = Path(__file__).resolve().parents[1]
LAYERS = 4
NUM_SPECULATIVE_TOKENS = 3
START_TIMEOUT = 1200.0  # seconds; ~1 min on an idle machine, many on 2 cores shared by a team
# For the tests that use the engine: pytest-timeout counts the session fixture's setup in the
# first of them.
ENGINE_TEST_TIMEOUT = int(START_TIMEOUT) + 600

_BUILD = """
import sys
LAYERS = int(sys.argv[2])
from pathlib import Path
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from pipeline.demo import build_tokenizer
d = Path(sys.argv[1])
d.mkdir(parents=True, exist_ok=True)
tok = build_tokenizer(d)
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256,
                  num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512, tie_word_embeddings=False,
                  pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                  bos_token_id=None)
LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(str(d))
"""


# Prompt lookup: drafts come from repeats in the context, which a random tiny model produces.
SPECULATION = {"method": "ngram", "num_speculative_tokens": NUM_SPECULATIVE_TOKENS,
               "prompt_lookup_max": 3, "prompt_lookup_min": 1}


@dataclass
class Tp2Engine:
    python: Path
    url: str
    port: int
    model_dir: Path
    profiler_dir: Path
    log: Path
    proc: subprocess.Popen[bytes]
    start_seconds: float

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/version", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def start_tp2_engine(root: Path) -> Tp2Engine:
    python = ensure("vllm032")
    model = root / "tiny-llama-hd32"
    built = subprocess.run([str(python), "-c", _BUILD, str(model), str(LAYERS)], cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)},
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    prof = root / "profiles"
    prof.mkdir()
    port = free_port()
    log = root / "vllm-tp2.log"
    profiler = {"profiler": "torch", "torch_profiler_dir": str(prof),
                "torch_profiler_with_stack": False}
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--tensor-parallel-size", "2", "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "256", "--dtype", "bfloat16", "--enforce-eager",
            "--profiler-config", json.dumps(profiler),
            "--speculative-config", json.dumps(SPECULATION)]
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    engine = Tp2Engine(python, url, port, model, prof, log, proc, 0.0)
    try:
        while not _answers(url):
            if proc.poll() is not None:
                pytest.fail(f"vLLM TP2 exited {proc.returncode} while starting:\n"
                            f"{engine.log_tail()}")
            if time.monotonic() - t0 > START_TIMEOUT:
                pytest.fail(f"vLLM TP2 did not answer within {START_TIMEOUT:g}s:\n"
                            f"{engine.log_tail()}")
            time.sleep(2)
    except BaseException:  # a failure or pytest-timeout: never leave the engine running
        stop_engine(engine)
        raise
    engine.start_seconds = time.monotonic() - t0
    return engine


def stop_engine(engine: Tp2Engine) -> None:
    """SIGTERM to the server's process group (engine core and workers), then SIGKILL."""
    if engine.proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        try:
            os.killpg(engine.proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            engine.proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# The engine the session fixture started, if any: stopped after the last test that uses it.
_started: list[Tp2Engine] = []


def last_user(items: list[pytest.Item]) -> str | None:
    """The node id of the last test (in run order) that uses `tp2_engine`."""
    users = [i.nodeid for i in items if "tp2_engine" in getattr(i, "fixturenames", ())]
    return users[-1] if users else None


def stop_started() -> None:
    """Stop the session's TP2 engine now, not at session end: its last user has run, and an
    idle engine left up would hold its memory (and its workers' CPU) through every later test,
    beside the engines those tests start (one engine on the machine at a time)."""
    while _started:
        stop_engine(_started.pop())


@pytest.fixture(scope="session")
def tp2_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tp2Engine]:
    engine = start_tp2_engine(tmp_path_factory.mktemp("vllm-tp2"))
    _started.append(engine)
    try:
        yield engine
    finally:
        stop_engine(engine)
