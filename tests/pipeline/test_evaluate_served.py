"""evaluate through a served head: vLLM's own spec-decode counters over the evaluate window.

The real part is the session's vLLM 0.32 TP2 engine (tests/tp2_engine.py), speculating with
n-gram prompt lookup (no trained head needed for the counters to move); evaluate runs as the
box runs it, `python -m pipeline evaluate` with the box environment's python.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pipeline import config as pconfig
from pipeline import manifest, progress
from pipeline.served import parse_counters, window
from tests.sshd_harness import free_port
from tests.tiny_pipeline import pipeline_toml, tiny_dataset, tiny_model
from tests.tp2_engine import ENGINE_TEST_TIMEOUT, NUM_SPECULATIVE_TOKENS, Tp2Engine

REPO = Path(__file__).resolve().parents[2]

# As prometheus_client writes vLLM's counters (two engines, one model), with other series around.
METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 45.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 1.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 99.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""


def test_counter_window_by_vllm_definitions() -> None:
    after = parse_counters(METRICS, "m")
    assert (after.drafts, after.draft_tokens, after.accepted) == (15, 45, 12)
    assert after.per_pos == {0: 8, 1: 3, 2: 1}
    before = parse_counters(METRICS.replace("} 10.0", "} 5.0").replace("} 12.0", "} 2.0")
                            .replace('position="0"} 8.0', 'position="0"} 0.0')
                            .replace('position="1"} 3.0', 'position="1"} 1.0')
                            .replace('position="2"} 1.0', 'position="2"} 0.0'), "m")
    w = window(before, after, 3)
    # 5 drafts, 0 draft tokens moved (same text), 10 accepted: 1 + 10/5, per position /5
    assert w["num_drafts"] == 5 and w["num_accepted_tokens"] == 10
    assert w["mean_length"] == pytest.approx(3.0)
    assert w["per_position"] == pytest.approx([8 / 5, 2 / 5, 1 / 5])
    assert not parse_counters(METRICS, "absent").seen


def _served_pipeline(root: Path, model: Path, url: str) -> Path:
    tiny_dataset(root, [{"conversations": [
        {"role": "user", "content": "a b"}, {"role": "assistant", "content": "c d"}]}])
    cfg = pipeline_toml(root, f"""[evaluate]
num_speculative_tokens = {NUM_SPECULATIVE_TOKENS}
max_new_tokens = 24
served_url = "{url}"
served_concurrency = 2
""", model=str(model), layer_ids="[1, 2, 3]", draft_vocab=16)
    c = pconfig.load(cfg)
    for stage in ("prepare", "extract", "vocab", "train"):  # inputs stand in: served evaluate
        manifest.write(c, stage, [], key="stand-in", summary={}, seconds=0.0)  # reads only eval
    prep = manifest.stage_dir(c, "prepare")
    prep.mkdir(parents=True, exist_ok=True)
    # Repeating prompts: prompt lookup finds its n-grams there.
    rows = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [9, 10, 9, 10, 9, 10, 9], [11, 12, 13, 11, 12, 13]]
    (prep / "eval.jsonl").write_text("".join(json.dumps({"prompt_ids": r}) + "\n" for r in rows))
    return cfg


def _evaluate(python: Path, cfg: Path) -> tuple[int, list[dict[str, Any]], str]:
    done = subprocess.run([str(python), "-m", "pipeline", "evaluate", "--config", str(cfg)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=900)
    records = [r for r in map(progress.parse, done.stdout.splitlines()) if r is not None]
    return done.returncode, records, done.stdout[-2000:] + done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(ENGINE_TEST_TIMEOUT)
def test_evaluate_measures_through_the_served_head(tp2_engine: Tp2Engine,
                                                   tmp_path: Path) -> None:
    cfg = _served_pipeline(tmp_path, tp2_engine.model_dir, tp2_engine.url)
    rc, records, tail = _evaluate(tp2_engine.python, cfg)
    assert rc == 0, tail
    (end,) = [r for r in records if r["type"] == "end"]
    s = end["summary"]
    assert s["source"] == "served" and s["url"] == tp2_engine.url
    report = json.loads((tmp_path / "out" / "evaluate" / "acceptance.json").read_text())
    r = report["heads"]["served"]
    k = NUM_SPECULATIVE_TOKENS
    # Prompt lookup may propose fewer than k tokens (a short match, or max_tokens near).
    assert r["num_drafts"] > 0 and r["num_drafts"] <= r["num_draft_tokens"] <= k * r["num_drafts"]
    assert sum(r["accepted_per_pos"]) == r["num_accepted_tokens"] <= r["num_draft_tokens"]
    assert r["accepted_per_pos"] == sorted(r["accepted_per_pos"], reverse=True)
    assert s["mean_length"] == pytest.approx(1 + r["num_accepted_tokens"] / r["num_drafts"])
    assert r["generated_tokens"] > 0
    # No transformers load happened: the served path never checks or loads the target.
    assert not any("target memory" in str(x.get("message", "")) for x in records)


def _config_only_target(tmp_path: Path) -> Path:
    """A target directory with only a config.json: enough for the pipeline config to load, and
    these runs end at the missing server before anything else of the target is read."""
    return tiny_model(tmp_path, "m")


@pytest.mark.parametrize("api", ["", "/v1/"])
def test_evaluate_says_when_no_server_answers(tmp_path: Path, api: str) -> None:
    """served_url as the server's base URL or its API URL (/v1): the same server is asked,
    at its base URL."""
    import sys

    port = free_port()
    cfg = _served_pipeline(tmp_path, _config_only_target(tmp_path),
                           f"http://127.0.0.1:{port}{api}")
    rc, records, tail = _evaluate(Path(sys.executable), cfg)
    assert rc == 1, tail
    (err,) = [r for r in records if r["type"] == "error"]
    assert f"no vLLM server answers at http://127.0.0.1:{port} (" in err["message"]
    assert "evaluate.served_url" in err["message"]


def test_served_evaluate_needs_no_torch(tmp_path: Path) -> None:
    """The served path runs where the target cannot be loaded at all: a python without torch or
    transformers (the system one) gets as far as asking the server, even with cpu_threads set
    (which once imported torch before every stage)."""
    bare = Path("/usr/bin/python3")
    probe = subprocess.run([str(bare), "-c", "import torch"], capture_output=True, text=True)
    assert probe.returncode != 0, "the bare python must not have torch"
    cfg = _served_pipeline(tmp_path, _config_only_target(tmp_path),
                           f"http://127.0.0.1:{free_port()}")
    cfg.write_text("cpu_threads = 1\n" + cfg.read_text())
    rc, records, tail = _evaluate(bare, cfg)
    assert rc == 1, tail
    (err,) = [r for r in records if r["type"] == "error"]
    assert "no vLLM server answers at http://127.0.0.1:" in err["message"], err
