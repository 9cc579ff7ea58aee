"""All-reduce: the bus-bandwidth sweep (real gloo on CPU) and trace analysis (a real CPU
profiler trace, and a GPU trace built in vLLM's format with a hand count)."""

from __future__ import annotations

import gzip
import itertools
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from remote.allreduce.capture import capture
from remote.allreduce.sweep import parse_sizes, run_sweep
from remote.allreduce.trace import DEFAULT_KERNELS, analyse_files, short_name
from remote.errors import Refused, SweepFailed, UsageError
from remote.link.hosts import HostConfig
from remote.link.transport import LocalTransport
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests.local_box import local_console_toml


def _json_events(out: str) -> list[Event]:
    return [Event.from_json(line) for line in out.splitlines() if line.startswith('{"ts"')]


# ------------------------------------------------------------------------------------- sweep


def test_sweep_script_imports_only_stdlib_and_torch() -> None:
    """It runs on the box with the container's python: no console/remote, no laptop deps."""
    import ast

    from remote.allreduce.sweep import SCRIPT

    tree = ast.parse(SCRIPT.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert {m for m in imported if m not in sys.stdlib_module_names} == {"torch"}


def test_size_ranges_double_like_nccl_tests() -> None:
    sizes = parse_sizes("4K..256M")
    assert sizes[0] == 4096 and sizes[-1] == 256 << 20 and len(sizes) == 17
    assert all(b == 2 * a for a, b in itertools.pairwise(sizes))
    assert parse_sizes("4KB,1M,1.5K") == [4096, 1 << 20, 1536]
    for bad in ("4X", "64K..4K", "", "0"):
        with pytest.raises(UsageError):
            parse_sizes(bad)


@pytest.mark.slow
def test_sweep_real_gloo_three_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = local_console_toml(tmp_path)
    rc = main(["allreduce", "sweep", "--host", "local", "--ranks", "3", "--sizes", "4K,64K",
               "--iters", "3", "--warmup", "1", "--json", "--no-record", "--config", str(cfg)])
    assert rc == 0
    events = _json_events(capsys.readouterr().out)
    results = [e for e in events if e.kind == ev.ALLREDUCE_RESULT]
    assert len(results) == 1
    progress = [(e.payload["done"], e.payload["total"]) for e in events
                if e.kind == ev.STAGE_PROGRESS]
    assert progress == [(1, 2), (2, 2)]  # streamed per size, not only at the end
    p = results[0].payload
    assert p["mode"] == "sweep" and p["backend"] == "gloo" and p["ranks"] == 3
    assert [r["size"] for r in p["rows"]] == [4096, 65536]
    for r in p["rows"]:
        assert r["ok"] is True and r["count"] == r["size"] // 4
        assert r["time_s"] > 0
        assert r["algbw"] == pytest.approx(r["size"] / r["time_s"])
        assert r["busbw"] == pytest.approx(r["algbw"] * 2 * 2 / 3)  # 2(n-1)/n, n = 3
    assert (tmp_path / "box" / "pipeline" / "allreduce_sweep.py").is_file()


async def test_sweep_without_torch_on_the_box_says_so(tmp_path: Path) -> None:
    # A box python that certainly lacks torch, on every machine: a fresh venv without
    # pip or system site-packages (a system python may or may not have torch).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True, capture_output=True, timeout=120)
    python = str(tmp_path / "bare" / "bin" / "python")
    assert subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0
    t = LocalTransport()
    await t.connect()
    host = HostConfig(name="local", ssh=None, python=python, workdir=str(tmp_path))
    with pytest.raises(SweepFailed, match="torch is not importable"):
        await run_sweep(t, host, EventBus(), ranks=2, sizes=[4096], iters=1, warmup=0,
                        timeout=60)


# ------------------------------------------------------------------------- trace: GPU, built

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
CUSTOM_1 = ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, "
            "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)")
CUSTOM_2 = "void vllm::cross_device_reduce_2stage<float, 8>(vllm::RankData*, int, int)"
MULTIMEM = "void multimem_all_reduce_kernel<__nv_bfloat16>(unsigned long, int)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"


def _k(name: str, ts: float, dur: float, cat: str = "kernel", stream: int = 7) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": 1}}


def _write_trace(path: Path, events: list[dict[str, Any]], rank: int | None) -> Path:
    data: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H200"}],
                            "traceEvents": events, "displayTimeUnit": "ms"}
    if rank is not None:
        data["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    raw = json.dumps(data).encode()
    path.write_bytes(gzip.compress(raw) if path.name.endswith(".gz") else raw)
    return path


def built_gpu_traces(d: Path) -> list[Path]:
    """Two ranks as vLLM's profiler writes them (tensorboard_trace_handler names).
    Hand count, microseconds:
      rank 0: device busy [0,160] U [200,400] = 360 (a kernel on a second stream inside
              [240,400] adds nothing); all-reduce 50 (NCCL) + 40 (custom 1stage) = 90 -> 25%
      rank 1: busy [1000,1300] U [1400,1500] = 400; all-reduce 30 + 20 = 50 -> 12.5%
              (+100 with --kernels '*my_custom_allreduce*' -> 150/400 = 37.5%)
      all:    140 / 760, 4 calls, mean 35 us
    Host-side ops (c10d::allreduce_, nccl:all_reduce) are not device time and never count."""
    rank0 = [
        _k("void at::native::vectorized_elementwise_kernel<4>(int)", 0, 100),
        _k(NCCL, 100, 50, stream=20),
        _k("Memcpy HtoD (Pageable -> Device)", 150, 10, cat="gpu_memcpy"),
        _k(CUSTOM_1, 200, 40),
        _k(GEMM, 240, 160),
        _k("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits>(Flash_fwd_params)", 300, 50,
           stream=9),
        _k("c10d::allreduce_", 90, 500, cat="cpu_op"),
        _k("nccl:all_reduce", 95, 400, cat="cpu_op"),
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python3"}},
    ]
    rank1 = [
        _k(CUSTOM_2, 1000, 30),
        _k(MULTIMEM, 1030, 20),
        _k(GEMM, 1050, 250),
        _k("void my_custom_allreduce_kernel<float>(float*)", 1400, 100),
        _k("c10d::allreduce_", 990, 600, cat="cpu_op"),
    ]
    return [
        _write_trace(d / "box_1234.1700000000000.pt.trace.json.gz", rank0, rank=0),
        _write_trace(d / "vllm-instance-rank-1.1700000000001.pt.trace.json", rank1, rank=None),
    ]


def test_gpu_trace_shares_match_the_hand_count(tmp_path: Path) -> None:
    p = analyse_files(built_gpu_traces(tmp_path))
    r0, r1, overall = p["rows"]
    assert (r0["rank"], r1["rank"], overall["rank"]) == (0, 1, "all")
    assert p["basis"] == "device"
    assert r0["busy_s"] == pytest.approx(360e-6) and r0["allreduce_s"] == pytest.approx(90e-6)
    assert r0["share"] == pytest.approx(0.25) and r0["calls"] == 2
    assert r0["mean_s"] == pytest.approx(45e-6)
    assert r1["share"] == pytest.approx(0.125) and r1["calls"] == 2
    assert overall["share"] == pytest.approx(140 / 760) and overall["calls"] == 4
    assert overall["mean_s"] == pytest.approx(35e-6)
    names = {k["name"]: k["calls"] for k in p["kernels"]}
    assert names == {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL": 1,
                     "vllm::cross_device_reduce_1stage": 1,
                     "vllm::cross_device_reduce_2stage": 1, "multimem_all_reduce_kernel": 1}
    extended = analyse_files(built_gpu_traces(tmp_path),
                             [*DEFAULT_KERNELS, "*my_custom_allreduce*"])
    assert extended["rows"][1]["share"] == pytest.approx(0.375)


def test_idle_and_unmatched_traces_say_why(tmp_path: Path) -> None:
    idle = _write_trace(tmp_path / "idle-rank-0.1.pt.trace.json", [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python3"}}], rank=0)
    assert "no device activity traced" in analyse_files([idle])["summary"]
    busy = _write_trace(tmp_path / "busy-rank-0.1.pt.trace.json", [_k(GEMM, 0, 10)], rank=0)
    p = analyse_files([busy])
    assert p["rows"][-1]["share"] == 0 and "check --kernels" in p["summary"]
    with pytest.raises(UsageError, match="two traces for rank 0"):
        analyse_files([idle, busy])


def test_short_kernel_names() -> None:
    assert short_name(CUSTOM_1) == "vllm::cross_device_reduce_1stage"
    assert short_name("gloo:all_reduce") == "gloo:all_reduce"
    assert short_name("void f<a<b>, c>(int)") == "f"


def test_trace_command_prints_a_table_and_emits_an_event(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(f) for f in built_gpu_traces(tmp_path)]
    assert main(["allreduce", "trace", *files, "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "allreduce.result: all-reduce 18.4% of device time over 2 rank(s), 4 calls" in out
    assert "vllm::cross_device_reduce_1stage" in out
    assert main(["allreduce", "trace", *files, "--kernels", "*my_custom_allreduce*", "--json",
                 "--no-record"]) == 0
    (event,) = [e for e in _json_events(capsys.readouterr().out)
                if e.kind == ev.ALLREDUCE_RESULT]
    assert event.payload["mode"] == "trace"
    assert event.payload["rows"][-1]["share"] == pytest.approx(240 / 760)


def test_trace_command_bad_input_is_one_line_exit_2(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.pt.trace.json"
    bad.write_text('{"not": "a trace"}')
    assert main(["allreduce", "trace", str(bad), "--no-record"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no traceEvents" in err
    truncated = tmp_path / "y.pt.trace.json.gz"
    truncated.write_bytes(gzip.compress(b'{"traceEvents": [')[:-8])
    assert main(["allreduce", "trace", str(truncated), "--no-record"]) == 2
    assert "not a Chrome trace" in capsys.readouterr().err


# ------------------------------------------------------------------------- trace: CPU, real

# Teardown is ordered so that neither rank can pull the ground from under the other: a FileStore
# (no TCPStore server living in rank 0's process, no free-port race), every collective done and
# both traces written (the barrier) before either rank destroys its group. Then each rank leaves
# with os._exit: once its trace is on disk nothing is left to do, and interpreter finalization
# and C++ static destructors (where torch's and gloo's threads are torn down, and where "terminate
# called without an active exception", exit -6, comes from: a std::thread destroyed unjoined)
# are no part of what this test checks. That abort was seen once in a loaded `make test` with the
# earlier TCPStore + no-barrier script and never reproduced since (see the trust2 report).
_RECORD = """
import os, sys, torch, torch.distributed as dist
rank, store, out, calls = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
x = torch.ones(4096)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    for _ in range(calls):
        y = x @ x
        dist.all_reduce(x)
prof.export_chrome_trace(out)
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


@pytest.mark.slow
def test_real_cpu_trace_of_a_gloo_all_reduce(tmp_path: Path) -> None:
    script = tmp_path / "record.py"
    script.write_text(_RECORD)
    store = str(tmp_path / "store")
    outs = [tmp_path / f"trace{r}.json" for r in (0, 1)]
    procs = [subprocess.Popen([sys.executable, str(script), str(r), store, str(outs[r]), "4"],
                              stderr=subprocess.PIPE) for r in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()[-2000:]
    raw = json.loads(outs[0].read_text())
    assert any(e.get("name") == "gloo:all_reduce" for e in raw["traceEvents"])
    assert any(e.get("name") == "c10d::allreduce_" for e in raw["traceEvents"])
    # Reversed order on purpose: ranks come from the trace's distributedInfo, not file order.
    p = analyse_files(list(reversed(outs)))
    r0, r1, overall = p["rows"]
    assert (r0["rank"], r1["rank"]) == (0, 1) and p["basis"] == "host"
    for r in (r0, r1):
        assert r["calls"] == 4  # one gloo:all_reduce per call, not also the c10d dispatcher op
        assert 0 < r["share"] < 1 and r["mean_s"] > 0
        assert r["allreduce_s"] <= r["busy_s"]
    assert overall["calls"] == 8
    assert [k["name"] for k in p["kernels"]] == ["gloo:all_reduce"]


# ----------------------------------------------------------------------------------- capture


class _VllmDouble(BaseHTTPRequestHandler):
    """Test double for vLLM's profiler endpoints (docs/design.md §2.8): POST /start_profile and
    /stop_profile; on stop every worker writes `<name>.<ns>.pt.trace.json.gz` into the
    profiler directory. With `enabled` false the routes do not exist (404), as in vLLM
    started without VLLM_TORCH_PROFILER_DIR / --profiler-config."""

    server: Any

    def _reply(self, code: int, body: dict[str, Any] | None = None) -> None:
        raw = json.dumps(body or {}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path == "/version":
            self._reply(200, {"version": "0.16.0"})
        else:
            self._reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        s = self.server
        if not s.enabled or self.path not in ("/start_profile", "/stop_profile"):
            self._reply(404, {"detail": "Not Found"})
            return
        s.calls.append(self.path)
        if self.path == "/stop_profile":
            built_gpu_traces(s.trace_dir)
        self._reply(200)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def vllm_double(tmp_path: Path) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VllmDouble)
    server.enabled = True  # type: ignore[attr-defined]
    server.calls = []  # type: ignore[attr-defined]
    server.trace_dir = tmp_path / "profiles"  # type: ignore[attr-defined]
    server.trace_dir.mkdir()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def test_capture_drives_the_profiler_and_fetches_new_traces(
        tmp_path: Path, vllm_double: ThreadingHTTPServer) -> None:
    trace_dir: Path = vllm_double.trace_dir  # type: ignore[attr-defined]
    old = trace_dir / "old-rank-0.1.pt.trace.json"
    old.write_text('{"traceEvents": []}')
    port = vllm_double.server_address[1]
    host = HostConfig(name="local", ssh=None, python=sys.executable, workdir=str(tmp_path),
                      vllm_url=f"http://127.0.0.1:{port}")
    bus = EventBus()
    t = LocalTransport()
    await t.connect()
    files = await capture(t, host, bus, profiler_dir=str(trace_dir), local_dir=tmp_path / "got",
                          seconds=0.1, poll=0.1)
    assert vllm_double.calls == ["/start_profile", "/stop_profile"]  # type: ignore[attr-defined]
    assert sorted(f.name for f in files) == ["box_1234.1700000000000.pt.trace.json.gz",
                                             "vllm-instance-rank-1.1700000000001.pt.trace.json"]
    assert all(f.parent == tmp_path / "got" for f in files)
    assert analyse_files(files)["rows"][-1]["share"] == pytest.approx(140 / 760)


async def test_capture_refused_when_vllm_has_no_profiler(
        tmp_path: Path, vllm_double: ThreadingHTTPServer) -> None:
    vllm_double.enabled = False  # type: ignore[attr-defined]
    host = HostConfig(name="local", ssh=None, python=sys.executable, workdir=str(tmp_path),
                      vllm_url=f"http://127.0.0.1:{vllm_double.server_address[1]}")
    t = LocalTransport()
    await t.connect()
    with pytest.raises(Refused, match=r"vLLM 0\.16\.0 .* has no profiler endpoints"):
        await capture(t, host, EventBus(), profiler_dir=str(tmp_path), local_dir=tmp_path / "g",
                      seconds=0.1)


def test_capture_command_end_to_end(tmp_path: Path, vllm_double: ThreadingHTTPServer,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    cfg = local_console_toml(tmp_path, vllm_url=f"http://127.0.0.1:{vllm_double.server_address[1]}")
    rc = main(["allreduce", "capture", "--host", "local", "--profiler-dir",
               str(vllm_double.trace_dir), "--seconds", "0.1",  # type: ignore[attr-defined]
               "--out", str(tmp_path / "out"), "--config", str(cfg), "--no-record"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "18.4% of device time" in out and "fetched 2 trace file(s)" in out
