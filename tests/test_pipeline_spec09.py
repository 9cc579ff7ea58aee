"""End to end on CPU with speculators 0.9.x (transformers 5.x), in the vllm032 box environment
(scripts/box_env.py: vLLM 0.32 CPU + speculators 0.9, the one the engine tests serve from, so the
suite builds one transformers-5 environment, not two): the box's python is that environment's,
the console drives it exactly as it drives a real box, through `console run` and detached jobs.

Smaller than the demo (fewer samples and epochs) to keep the suite's time down; it checks the
0.9 formats, the `speculators train` path on CPU, and the offline evaluation with 0.9's head.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from console.cli import main as console_main
from console.session import SessionReader
from remote import events as ev
from tests import box_env

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
STAGES = ("prepare", "extract", "vocab", "train", "evaluate")


@pytest.fixture(scope="module")
def spec09_python() -> Path:
    return box_env.ensure("vllm032")


def test_speculators_09_path_end_to_end(tmp_path: Path, spec09_python: Path) -> None:
    demo = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1"}
    subprocess.run([str(spec09_python), "-m", "pipeline", "demo-setup", "--dir", str(demo)],
                   cwd=REPO, env=env, check=True, capture_output=True, timeout=600)
    cfg = demo / "pipeline.toml"
    text = cfg.read_text()
    for old, new in (("eval_samples = 8", "eval_samples = 4\nsamples = 120"),
                     ("epochs = 8", "epochs = 3"), ("max_new_tokens = 24", "max_new_tokens = 12")):
        assert old in text
        text = text.replace(old, new)
    cfg.write_text(text)
    console_toml = tmp_path / "console.toml"
    console_toml.write_text(f'[hosts.local]\nworkdir = "{tmp_path / "box"}"\n'
                            f'python = "{spec09_python}"\n')
    session = tmp_path / "s.jsonl"
    rc = console_main(["run", "--host", "local", "--config", str(console_toml),
                       "--pipeline", str(cfg), "--session", str(session)])
    assert rc == 0
    with SessionReader(session) as reader:
        events = list(reader.events())
    ends = {e.payload["stage"]: e.payload for e in events if e.kind == ev.STAGE_END}
    assert all(ends[s]["ok"] for s in STAGES)
    infos = " ".join(e.payload.get("message", "") for e in events if e.kind == ev.CONSOLE_INFO)
    assert "speculators 0.9.0 (0.9 path) on cpu" in infos

    out = demo / "out"
    # 0.9's on-disk format: hs_{i}.safetensors [seq, 4, H] beside an Arrow dataset.
    from safetensors.torch import load_file

    sample = load_file(str(out / "extract" / "hidden_states" / "hs_0.safetensors"))
    assert sample["hidden_states"].shape[1:] == (4, 64)
    assert sample["hidden_states"].shape[0] == sample["token_ids"].shape[0]
    assert (out / "extract" / "state.json").exists()
    assert not list((out / "extract" / "hidden_states").glob("*.pt"))

    conf = json.loads((out / "train" / "checkpoint" / "config.json").read_text())
    assert conf["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert conf["eagle3_console"]["speculators"] == "0.9.0"
    assert conf["eagle3_console"]["layer_ids"] == [1, 2, 3, 4]
    spec = json.loads((out / "train" / "speculative_config.json").read_text())
    assert spec["method"] == "eagle3" and spec["num_speculative_tokens"] == 3

    report = json.loads((out / "evaluate" / "acceptance.json").read_text())
    trained = report["heads"]["trained"]
    assert report["prompts"] == 4 and trained["num_drafts"] > 0
    assert trained["mean_length"] == pytest.approx(
        1 + trained["num_accepted_tokens"] / trained["num_drafts"])
    assert trained["mean_length"] >= report["heads"]["untrained"]["mean_length"]
