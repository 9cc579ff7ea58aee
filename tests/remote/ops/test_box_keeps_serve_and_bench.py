"""Issue 42, point 1: what a console opened later shows of servers and bench results comes from
the box, not from the memory of the console that started them.

- A serve job running on the box (here the vLLM test double, tests/vllm_double.py, launched as
  the detached job `serve-speculative` with the serve job's `--bind/--port`, the part of its
  command line a console reads) is found with its URL, pid and model: from its served.json in
  its run directory when the console that started it wrote one (and then with its start time),
  else from its command line and one /v1/models question. `console serve status` prints it.
- A bench run keeps its result in the box's `<workdir>/bench/`; on connect the console reads
  that folder (its own results and `vllm bench serve --save-result` files put there) and
  publishes each sweep as the run did, so the Bench screen's rows are the same.
The real engine and the TUI reopened beside the one that started the server:
tests/console/tui/test_tui_serve.py.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from console.cli import main
from console.tui.model import ConsoleState
from console.tui.widgets.bench import server_rows, sweep_table
from remote.link.hosts import parse_config
from remote.link.transport import LocalTransport
from remote.ops import bench as bench_ops
from remote.ops import serve as serve_ops
from remote.serving.records import RECORD_NAME, Served, write_record
from remote.serving.serve import ServeRunner
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests.sshd_harness import free_port
from tests.vllm_double_fixture import vllm_double  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[3]
VLLM_FILE = ROOT / "tests" / "data" / "vllm032-bench-serve-result.json"
# The serve job's command line as far as a console reads it (`--bind H --port P`): the double
# started under it, as `python -m pipeline serve` starts vLLM under its own.
DOUBLE = 'exec "$0" -m tests.vllm_double "{}" "$4"'


def _host(tmp_path: Path, port: int) -> Any:
    toml = tmp_path / "console.toml"
    toml.write_text(f'[hosts.local]\nworkdir = "{tmp_path / "box"}"\n'
                    f'vllm_url = "http://127.0.0.1:{port}"\n')
    return toml, parse_config(toml.read_text(), str(toml)).host("local")


def _folded(bus: EventBus) -> tuple[ConsoleState, list[Event]]:
    state, seen = ConsoleState(["local"]), []

    def fold(e: Event) -> None:
        seen.append(e)
        state.apply(e)

    bus.add_callback(fold)
    return state, seen


async def _answers(url: str) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            try:
                if (await http.get(url + "/v1/models")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"nothing answers at {url}")


async def test_a_running_server_is_found_with_its_url_model_and_pid(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    toml, host = _host(tmp_path, port)
    transport = LocalTransport("local")
    await transport.connect()
    bus = EventBus()
    state, seen = _folded(bus)
    r = ServeRunner(transport, host, bus)
    info = await r.jobs.launch(["sh", "-c", DOUBLE, sys.executable, "--bind", "127.0.0.1",
                                "--port", str(port)], name="serve-speculative",
                               env={"PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
    try:
        url = f"http://127.0.0.1:{port}"
        await _answers(url)
        # No record (started by an older console, or one that quit while it loaded): its URL
        # from its command line, its model asked once, its pid from the job.
        found = await serve_ops.found(r)
        assert found == {"speculative": Served(role="speculative", url=url, run_id=info.run_id,
                                               seconds=None, model="double-model",
                                               pid=info.pid)}
        ready = [e for e in seen if e.kind == ev.SERVE_READY]
        assert ready[-1].payload["found"] is True and ready[-1].payload["pid"] == info.pid
        srv = state.host("local").servers["speculative"]
        assert (srv.state, srv.url, srv.pid, srv.model) == ("ready", url, info.pid, "double-model")

        # The record a starting console writes: read back whole (its start time too), and it is
        # what a console opened later shows, the same row as the starter's.
        started = Served(role="speculative", url=url, run_id=info.run_id, seconds=42.5,
                         model="double-model", pid=info.pid)
        await write_record(transport, bus, "local", info, started)
        record = tmp_path / "box" / "runs" / info.run_id / RECORD_NAME
        assert json.loads(record.read_text())["seconds"] == 42.5
        starter = ConsoleState(["local"])
        starter.apply(Event.checked(ev.SERVE_READY, "local", {
            "role": "speculative", "url": url, "run_id": info.run_id, "seconds": 42.5,
            "model": "double-model", "pid": info.pid}))
        reopened_bus = EventBus()
        reopened, _ = _folded(reopened_bus)
        assert await serve_ops.found(ServeRunner(transport, host, reopened_bus)) == {
            "speculative": started}
        rows = server_rows(reopened.host("local"))
        assert rows == server_rows(starter.host("local"))
        assert rows == [("speculative", "ready", url,
                         f"job {info.run_id}, pid {info.pid}, model double-model, "
                         "answered after 42 s")]

        # `console serve status` says the same, read from the box.
        capsys.readouterr()
        assert await asyncio.to_thread(main, ["serve", "status", "--host", "local", "--config",
                                              str(toml), "--no-record"]) == 0
        out = capsys.readouterr().out
        assert (f"speculative server at {url}: job {info.run_id}, pid {info.pid}, "
                "model double-model, answered after 42 s") in out, out

        # `console serve stop` cancels it: one line each, with the state it ended in.
        assert await asyncio.to_thread(main, ["serve", "stop", "--host", "local", "--config",
                                              str(toml), "--no-record"]) == 0
        out = capsys.readouterr().out
        assert f"speculative server {info.run_id}: " in out, out
    finally:
        await r.stop(info.run_id, "speculative")
        await r.close()
        await transport.close()
    with pytest.raises(httpx.ConnectError):  # the job's process group went with it
        httpx.get(url + "/v1/models")


async def test_bench_results_kept_on_the_box_come_back_as_the_run_showed_them(
        vllm_double, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    double = vllm_double(speculative=True, step_base_s=0.002, step_per_seq_s=0.0005)
    toml, host = _host(tmp_path, double.port)
    out = tmp_path / "result.json"
    rc = await asyncio.to_thread(main, [
        "bench", "run", "--host", "local", "--config", str(toml), "--concurrency", "1,2",
        "--requests", "3", "--max-tokens", "8", "--out", str(out), "--no-record", "--json"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    live = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    live_points = [e["payload"] for e in live if e["kind"] == ev.BENCH_POINT]
    live_summary = [e["payload"] for e in live if e["kind"] == ev.BENCH_SUMMARY][-1]
    kept = tmp_path / "box" / "bench" / out.name
    assert kept.read_bytes() == out.read_bytes()
    assert live_summary["box_file"] == str(kept)
    # A user's own `vllm bench serve --save-result` file, and something that is no result.
    shutil.copy(VLLM_FILE, kept.parent / "vllm-run.json")
    (kept.parent / "notes.json").write_text('{"hello": 1}')

    transport = LocalTransport("local")
    await transport.connect()
    try:
        bus = EventBus()
        state, seen_events = _folded(bus)
        seen: set[str] = set()
        read = await bench_ops.found_results(transport, host, bus, seen=seen)
        assert read == [str(kept), str(kept.parent / "vllm-run.json")]
        assert await bench_ops.found_results(transport, host, bus, seen=seen) == []  # once
    finally:
        await transport.close()
    h = state.host("local")
    ours = [p for p in h.bench_points if p.get("box_file") == str(kept)]
    keys = ("label", "concurrency", "requests", "failed", "output_tokens", "output_tok_s",
            "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "acceptance")
    assert [{k: p[k] for k in keys} for p in ours] == [{k: p[k] for k in keys}
                                                       for p in live_points]
    # The sweep table of a console that ran it and of one that read the box: the same rows.
    watcher = ConsoleState(["local"])
    for p in live_points:
        watcher.apply(Event.checked(ev.BENCH_POINT, "local", p))
    assert _text(sweep_table(ours)) == _text(sweep_table(watcher.host("local").bench_points))
    theirs = [p for p in h.bench_points if p.get("source") == "vllm bench serve"]
    assert theirs and all(p["box_file"].endswith("vllm-run.json") for p in theirs)
    assert h.bench_summary["summary"].startswith(theirs[0]["label"])  # the newest file's, last
    summaries = [e.payload for e in seen_events if e.kind == ev.BENCH_SUMMARY]
    assert summaries[0]["summary"] == live_summary["summary"]
    assert any("notes.json left out" in str(e.payload.get("message"))
               for e in seen_events if e.kind == ev.CONSOLE_INFO)


def _text(renderable: object) -> str:
    from rich.console import Console

    console = Console(width=200, color_system=None, record=True)
    with console.capture() as cap:
        console.print(renderable)
    return cap.get()


async def test_a_served_run_comes_back_with_the_summary_it_published(tmp_path: Path) -> None:
    """`console run --serve` publishes a summary with more than its runs say (offline vs served
    acceptance, the label "served"); its result file keeps it, and a console that reads the
    file from the box publishes that summary, not one rebuilt from the runs."""
    from remote.bench.compare import compare_runs
    from remote.bench.results import BenchRun, save_result

    point = {"concurrency": 1, "requests": 4, "failed": 0, "output_tokens": 32, "duration": 0.8,
             "output_tok_s": 40.0, "req_s": 5.0, "ttft_p50": 0.01, "ttft_p99": 0.02,
             "tpot_p50": 0.005, "tpot_p99": 0.006}
    run = {"url": "u", "model": "m", "max_tokens": 8, "rounds": 1, "prompts": "p",
           "prompts_sha256": "0" * 64, "started": "2026-12-06T12:00:00"}
    base = msgspec.convert({**run, "label": "baseline", "speculative": False,
                            "points": [point]}, BenchRun)
    spec = msgspec.convert({**run, "label": "speculative", "speculative": True,
                            "points": [{**point, "output_tok_s": 60.0}]}, BenchRun)
    comparison = compare_runs(base, spec)
    published = {"label": "served", **comparison.to_dict(), "offline": {"mean_length": 1.2},
                 "served": {"mean_length": 1.19}, "start_seconds": {"speculative": 3.5},
                 "summary": comparison.summary()}
    _toml, host = _host(tmp_path, free_port())
    save_result(tmp_path / "box" / "bench" / "served.json", spec, baseline=base,
                comparison=comparison.to_dict(), summary=published)
    transport = LocalTransport("local")
    await transport.connect()
    try:
        bus = EventBus()
        state, seen_events = _folded(bus)
        assert len(await bench_ops.found_results(transport, host, bus)) == 1
    finally:
        await transport.close()
    (summary,) = [e.payload for e in seen_events if e.kind == ev.BENCH_SUMMARY]
    assert {k: v for k, v in summary.items() if k not in ("box_file", "found")} == published
    assert state.host("local").bench_summary["label"] == "served"
