"""The serve step's pieces that need no engine: the server's argv from the pipeline's output,
the readable log tail, the sweep's summed acceptance, the offline-vs-served line, and a host
whose python is the box environment. The live engine is tests/remote/serving/test_engine_serve.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import config as config_mod
from pipeline.errors import PipelineError
from pipeline.serve import SERVER_MODULE, server_argv
from remote.bench.results import Point
from remote.bench.served import offline_vs_served, sweep_acceptance
from remote.errors import UsageError
from remote.link.hosts import parse_config
from remote.serving.serve import LOG_LINE_CHARS, default_url, read_offline, readable_tail
from tests.tiny_pipeline import pipeline_toml, tiny_dataset, tiny_model


def _pipeline(tmp_path: Path) -> Path:
    tiny_model(tmp_path, "target", architectures=["LlamaForCausalLM"], model_type="llama",
               num_attention_heads=2, num_key_value_heads=1, vocab_size=64000)
    tiny_dataset(tmp_path)
    return pipeline_toml(tmp_path, model="target")


def test_server_argv_takes_trains_speculative_config(tmp_path: Path) -> None:
    cfg = config_mod.load(_pipeline(tmp_path), check_disk=False)
    with pytest.raises(PipelineError, match="run the pipeline through train first"):
        server_argv(cfg, host="127.0.0.1", port=8000, baseline=False)
    head = tmp_path / "out" / "train" / "checkpoint"
    head.mkdir(parents=True)
    spec = {"method": "eagle3", "model": str(head), "num_speculative_tokens": 3,
            "draft_tensor_parallel_size": 1}
    (head.parent / "speculative_config.json").write_text(json.dumps(spec))
    with pytest.raises(PipelineError, match=r"has no config\.json"):
        server_argv(cfg, host="127.0.0.1", port=8000, baseline=False)
    (head / "config.json").write_text("{}")
    argv = server_argv(cfg, host="127.0.0.1", port=8000, baseline=False, extra=["--x"],
                       python="/py")
    assert argv[:3] == ["/py", "-m", SERVER_MODULE]
    assert argv[3:5] == ["--model", str(cfg.model_path)]
    assert argv[argv.index("--port") + 1] == "8000"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == spec
    assert argv[-1] == "--x"
    base = server_argv(cfg, host="0.0.0.0", port=8001, baseline=True)
    assert "--speculative-config" not in base
    assert base[base.index("--host") + 1] == "0.0.0.0"


def test_server_argv_trusts_remote_code_when_the_pipeline_does(tmp_path: Path) -> None:
    """A Kimi-K2.5 checkpoint ships its tokenizer as remote code: the server must get the same
    trust the pipeline's own loads got (target.trust_remote_code), and only then."""
    path = _pipeline(tmp_path)
    plain = server_argv(config_mod.load(path, check_disk=False), host="h", port=1, baseline=True)
    assert "--trust-remote-code" not in plain
    path.write_text(path.read_text().replace('model = "target"\n',
                                             'model = "target"\ntrust_remote_code = true\n'))
    cfg = config_mod.load(path, check_disk=False)
    assert cfg.target.trust_remote_code
    assert "--trust-remote-code" in server_argv(cfg, host="h", port=1, baseline=True)


def test_readable_tail_keeps_the_end_cut_short() -> None:
    lines = [f"line {i}" for i in range(100)] + ["", "x" * 5000, "   "]
    tail = readable_tail(lines, n=5)
    assert tail[:4] == ["line 96", "line 97", "line 98", "line 99"]
    assert len(tail[-1]) == LOG_LINE_CHARS and tail[-1].endswith("...")


def _point(c: int, acc: dict[str, object] | None) -> Point:
    return Point(concurrency=c, requests=c, failed=0, output_tokens=10, duration=1.0,
                 output_tok_s=10.0, req_s=1.0, ttft_p50=None, ttft_p99=None, tpot_p50=None,
                 tpot_p99=None, acceptance=acc)


def test_sweep_acceptance_sums_counters_not_rates() -> None:
    a = {"drafts": 10.0, "draft_tokens": 30.0, "accepted": 5.0, "accepted_per_pos": [4, 1, 0]}
    b = {"drafts": 30.0, "draft_tokens": 90.0, "accepted": 30.0,
         "accepted_per_pos": [20, 8, 2]}
    got = sweep_acceptance([_point(1, a), _point(4, b), _point(8, None)])
    assert got is not None
    assert got["drafts"] == 40 and got["accepted"] == 35
    assert got["mean_length"] == pytest.approx(1 + 35 / 40)  # not the mean of 1.5 and 2.0
    assert got["rate"] == pytest.approx(35 / 120)
    assert got["per_position"] == pytest.approx([24 / 40, 9 / 40, 2 / 40])
    assert sweep_acceptance([_point(1, None)]) is None


def test_offline_vs_served_line() -> None:
    line = offline_vs_served({"mean_length": 1.55, "per_position": [0.4, 0.1, 0.05]},
                             {"mean_length": 1.48, "per_position": [0.37, 0.1, 0.01],
                              "rate": 0.16, "drafts": 117})
    assert line.startswith("mean acceptance length: offline 1.55")
    assert "vs served 1.48" in line and "117 drafts" in line and "16.0%" in line
    assert "served n/a" in offline_vs_served({"mean_length": 1.2}, None)


def test_read_offline_rejects_other_json(tmp_path: Path) -> None:
    bad = tmp_path / "a.json"
    bad.write_text('{"heads": {}}')
    with pytest.raises(UsageError, match="not the pipeline's evaluate output"):
        read_offline(bad)
    good = tmp_path / "b.json"
    good.write_text(json.dumps({"prompts": 8, "max_new_tokens": 24, "heads": {"trained": {
        "mean_length": 1.4, "rate": 0.13, "per_position": [0.3, 0.1, 0.0]}}}))
    assert read_offline(good)["mean_length"] == 1.4


def test_box_env_host_entries(tmp_path: Path) -> None:
    """`local` and an SSH host can both name the box environment's python; the baseline server
    goes on the next port of vllm_url."""
    cfg = parse_config(
        '[hosts.local]\npython = "/venv-box/bin/python"\nworkdir = "/tmp/w"\n'
        '[hosts.loop]\nssh = "root@127.0.0.1"\nruntime = "none"\npython = "/venv-box/bin/python"\n'
        'vllm_url = "http://127.0.0.1:8100"\n', "<string>")
    assert cfg.host("local").python == "/venv-box/bin/python" and cfg.host("local").is_local
    loop = cfg.host("loop")
    assert loop.python == "/venv-box/bin/python" and not loop.is_local
    assert default_url(loop, "speculative") == "http://127.0.0.1:8100"
    assert default_url(loop, "baseline") == "http://127.0.0.1:8101"
