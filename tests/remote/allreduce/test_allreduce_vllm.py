"""All-reduce in decode steps, from vLLM's own per-step annotations.

The real part: vLLM 0.32 with tensor parallel 2 on this CPU (session fixture `tp2_engine`),
profiled by `console allreduce capture` through the loopback sshd (the SSH port forward to the
server, the trace listing and SFTP fetch a GPU box gets). A GPU trace cannot be made here, so the
device-basis decode split is checked on a trace built in Kineto's format with a hand count.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from remote.allreduce.trace import analyse_files, step_windows
from remote.errors import UsageError
from remote.spine import events as ev
from remote.spine.events import Event
from tests.sshd_harness import Sshd
from tests.tp2_engine import ENGINE_TEST_TIMEOUT, LAYERS, Tp2Engine

# The engine's target all-reduces after attention and after the MLP of every layer, plus once
# for the vocab-parallel embedding, in every step.


def _events(out: str) -> list[Event]:
    return [Event.from_json(line) for line in out.splitlines() if line.startswith('{"ts"')]


# ------------------------------------------------------------------- built: device basis, GPU


def _x(name: str, ts: float, dur: float, cat: str, corr: int | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts,
                         "dur": dur}
    if corr is not None:
        e["args"] = {"correlation": corr}
    return e


NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def built_gpu_steps(path: Path) -> Path:
    """One rank, two steps as Kineto writes them: host annotations + launches (cuda_runtime,
    correlation ids) + kernels on the device timeline, which run later than their launches.
    Hand count, microseconds:
      prefill step [0,100]:  launches 1 (GEMM 200..300), 2 (NCCL 300..340)
      decode step [400,450]: launches 3 (GEMM 500..520), 4 (NCCL 520..550), 5 (GEMM 560..570)
      decode: busy 20+30+10 = 60, all-reduce 30 -> 50%; prefill: 40/140 -> 28.6%
      a step with no requests (execute_context_0(0)_generation_0(0)) is neither."""
    events = [
        _x("execute_context_2(40)_generation_0(0)", 0, 100, "user_annotation"),
        _x("execute_context_2(40)_generation_0(0)", 200, 140, "gpu_user_annotation"),
        _x("cudaLaunchKernel", 10, 5, "cuda_runtime", 1),
        _x("cudaLaunchKernel", 20, 5, "cuda_runtime", 2),
        _x(GEMM, 200, 100, "kernel", 1),
        _x(NCCL, 300, 40, "kernel", 2),
        _x("execute_context_0(0)_generation_2(2)", 400, 50, "user_annotation"),
        _x("cudaLaunchKernel", 405, 5, "cuda_runtime", 3),
        _x("cudaLaunchKernel", 410, 5, "cuda_runtime", 4),
        _x("cudaLaunchKernel", 420, 5, "cuda_runtime", 5),
        _x(GEMM, 500, 20, "kernel", 3),
        _x(NCCL, 520, 30, "kernel", 4),
        _x(GEMM, 560, 10, "kernel", 5),
        _x("execute_context_0(0)_generation_0(0)", 600, 5, "user_annotation"),
    ]
    path.write_bytes(gzip.compress(json.dumps({
        "traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 1}}).encode()))
    return path


def test_device_decode_share_matches_the_hand_count(tmp_path: Path) -> None:
    p = analyse_files([built_gpu_steps(tmp_path / "dp0_pp0_tp0_rank0.1.pt.trace.json.gz")])
    assert p["decode"]["steps"] == 1 and p["prefill"]["steps"] == 1
    assert p["decode"]["share"] == pytest.approx(30 / 60)
    assert p["prefill"]["share"] == pytest.approx(40 / 140)
    assert p["decode"]["calls"] == 1 and p["prefill"]["calls"] == 1
    assert "decode steps: all-reduce 50.0% of 1 step(s)" in p["summary"]


def test_step_annotations_both_spellings() -> None:
    simple = {"ph": "X", "ts": 0, "dur": 10, "name": "execute_context_0(0)_generation_3(3)"}
    detailed = {"ph": "X", "ts": 20, "dur": 10,
                "name": "execute_12_context_1(sq8sk8sqsq64sqsk64)_generation_4(sq4sk40sqsq4"
                        "sqsk40)"}
    w = step_windows([simple, detailed])
    assert w == {"decode": [(0, 10)], "prefill": [(20, 30)]}


def test_frontend_trace_is_named_and_ignored(tmp_path: Path) -> None:
    worker = built_gpu_steps(tmp_path / "rank0.1.pt.trace.json.gz")
    front = tmp_path / "box_42.async_llm.1.pt.trace.json.gz"
    front.write_bytes(gzip.compress(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 9}]}
    ).encode()))
    p = analyse_files([front, worker])
    assert [i["file"] for i in p["ignored"]] == [str(front)]
    assert [r["rank"] for r in p["rows"]] == [0, "all"]
    with pytest.raises(UsageError, match="only vLLM frontend traces"):
        analyse_files([front])


# ----------------------------------------------------------------- real: vLLM TP2 on this CPU


def _console_toml(sshd: Sshd, tmp_path: Path, engine: Tp2Engine) -> Path:
    h = sshd.host_config("box", workdir=str(tmp_path / "box"))
    return sshd.console_toml(tmp_path / "console.toml", python=h.python, workdir=h.workdir,
                             vllm_url=engine.url)


@pytest.mark.slow
@pytest.mark.timeout(ENGINE_TEST_TIMEOUT)
def test_capture_real_tp2_engine_over_ssh(sshd: Sshd, tp2_engine: Tp2Engine,
                                          tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _console_toml(sshd, tmp_path, tp2_engine)
    out_dir = tmp_path / "fetched"
    before = set(tp2_engine.profiler_dir.iterdir())
    rc = main(["allreduce", "capture", "--host", "box", "--config", str(cfg),
               "--profiler-dir", str(tp2_engine.profiler_dir), "--seconds", "1",
               "--requests", "3", "--max-tokens", "12", "--out", str(out_dir), "--json",
               "--no-record"])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:] + tp2_engine.log_tail()
    (event,) = [e for e in _events(out) if e.kind == ev.ALLREDUCE_RESULT]
    p = event.payload
    # The workers' traces came back over SFTP; the frontend's stayed on the box, named.
    fetched = sorted(f.name for f in out_dir.iterdir())
    assert len(fetched) == 2 and not any(".async_llm." in f for f in fetched), fetched
    new = set(tp2_engine.profiler_dir.iterdir()) - before
    assert any(".async_llm." in f.name for f in new)
    assert any("left 1 vLLM frontend trace" in e.payload.get("message", "")
               for e in _events(out) if e.kind == ev.CONSOLE_INFO)
    # vLLM's CPU tensor-parallel all-reduce is its shared-memory op, on both ranks.
    assert p["basis"] == "host" and [r["rank"] for r in p["rows"]] == [0, 1, "all"]
    assert [k["name"] for k in p["kernels"]] == ["_C::shm_allreduce"]
    per_step = 2 * LAYERS + 1
    for r in p["rows"][:2]:
        d, f = r["decode"], r["prefill"]
        assert d["steps"] >= 1 and f["steps"] >= 1, r
        # Every step all-reduces the same number of times: counted once, not with wrappers.
        assert d["calls"] == per_step * d["steps"] and f["calls"] == per_step * f["steps"], r
        assert 0 < d["allreduce_s"] <= d["time_s"]
    d = p["decode"]
    assert 0 < d["share"] < 1
    print(f"\nvLLM 0.32 TP2 on CPU: all-reduce {100 * d['share']:.1f}% of decode-step time "
          f"({d['steps']} steps over 2 ranks), prefill {100 * p['prefill']['share']:.1f}%; "
          f"engine start {tp2_engine.start_seconds:.0f}s")


@pytest.mark.slow
@pytest.mark.timeout(ENGINE_TEST_TIMEOUT)
def test_trace_command_on_the_real_profiler_dir(tp2_engine: Tp2Engine,
                                                tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`console allreduce trace DIR/*` on what vLLM wrote (frontend file included): the
    frontend trace is reported as ignored, the table names the op and the decode rows."""
    import httpx

    prof = tmp_path / "copy"
    with httpx.Client(base_url=tp2_engine.url, timeout=600) as c:
        before = set(tp2_engine.profiler_dir.iterdir())
        assert c.post("/start_profile").status_code == 200
        r = c.post("/v1/completions", json={"model": str(tp2_engine.model_dir),
                                            "prompt": "a b c", "max_tokens": 6,
                                            "temperature": 0.0, "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert c.post("/stop_profile").status_code == 200
    new = [f for f in set(tp2_engine.profiler_dir.iterdir()) - before
           if f.name.endswith(".json.gz")]
    prof.mkdir()
    for f in new:
        shutil.copy(f, prof / f.name)
    assert main(["allreduce", "trace", *map(str, sorted(prof.iterdir())), "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "vLLM frontend trace (API server, CPU only)" in out
    assert "_C::shm_allreduce" in out and "decode steps: all-reduce" in out
    assert "\nall   decode " in out
