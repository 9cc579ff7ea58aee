"""`console bench run` beside `vllm bench serve` (vLLM 0.32's own client, the box environment's
vLLM: tests/vllm_bench_driver.py runs the command's own code, kept loaded) on the session's
speculative server (tests/engine_fixture.py), the same prompts and settings
(tests/vllm_peer.py). Issue #42's done-when.

What is asserted and why it can fail:
- the `vllm` command runs at all in the box environment (it asks importlib.metadata for
  "vllm", which the CPU wheel does not provide without scripts/box_env.py's alias);
- acceptance is equal in every pair: greedy decoding of the same prompts at concurrency 1
  drafts and accepts the same tokens, and each client reads the same counters over its own
  window, so a console that counted another window (the warm-up, or a scrape at the wrong
  moment) differs;
- the output tokens are the same (usage's completion_tokens on both sides);
- TTFT and TPOT medians within 15 % of vLLM's: the two clients take them by the same
  definitions (remote/bench/client.py), so what is left between them is the machine. They run
  alternately, never at once (at once each slowed the other: 0.7-7x), PAIRS pairs with the
  order swapped every pair, and the figure compared is the median over the pairs of each
  run's median. A definition that drifted (TTFT at the first chunk with text, as before #42,
  read 1.6-1.8x) fails it;
- `console bench compare` reads vLLM's --save-result file as a run, in the same table.
The ratios are no wall-clock figures: both sides are measured in the same minutes on the same
server. benchmarks/bench_vs_vllm.py prints every figure's ratio (docs/measurements.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from console.cli import main as console_main
from tests.engine_fixture import EngineBox
from tests.vllm_peer import (
    PeerSettings,
    VllmPeer,
    alternating,
    figures,
    served_model,
    single_turn_prompts,
    vllm_bench,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


PAIRS = 5  # alternating pairs; medians over them
REQUESTS = 16  # per run, at concurrency 1: each run's median is one of 16
TOLERANCE = 0.15  # issue #42: TTFT and TPOT medians within 15 %


def test_console_bench_matches_vllm_bench_serve(served_engine: EngineBox, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    s = PeerSettings(url=served_engine.url, model=served_model(served_engine.url),
                     requests=REQUESTS, max_tokens=24)
    prompts = single_turn_prompts(served_engine.out / "prepare" / "eval.jsonl",
                                  tmp_path / "prompts.jsonl")
    peer = VllmPeer(served_engine.python)  # imports vLLM while the command below runs
    try:
        # The `vllm` command itself works in the box environment (not timed: a few requests).
        cli = vllm_bench(served_engine.python, dataclasses.replace(s, requests=2), prompts,
                         tmp_path, "vllm-command")
        assert cli["completed"] == 2 and cli["spec_decode_num_drafts"] > 0
        runs = alternating(peer, s, prompts, tmp_path, "pair", PAIRS)
    finally:
        peer.close()
    for ours, vllm in zip(runs.console, runs.vllm, strict=True):  # each client alone: equal
        assert vllm["completed"] == s.requests and vllm["failed"] == 0, vllm.get("errors")
        assert vllm["spec_decode_num_drafts"] > 0
        (point,) = ours["points"]
        assert point["requests"] == s.requests and point["failed"] == 0, point["errors"]
        assert point["output_tokens"] == vllm["total_output_tokens"] == s.requests * s.max_tokens
        acc = point["acceptance"]
        assert acc["drafts"] == vllm["spec_decode_num_drafts"]
        assert acc["accepted"] == vllm["spec_decode_accepted_tokens"]
        f = figures(ours, vllm)
        assert f["mean acceptance length"][0] == pytest.approx(f["mean acceptance length"][1])
        assert f["acceptance rate"][0] == pytest.approx(f["acceptance rate"][1])
    medians = runs.figures()
    for name in ("TTFT p50", "TPOT p50"):
        console, theirs = medians[name]
        ratio = console / theirs
        assert abs(ratio - 1) <= TOLERANCE, (
            f"{name}: console {console * 1000:.2f} ms / vllm {theirs * 1000:.2f} ms = "
            f"{ratio:.3f} (pairs: {', '.join(f'{r:.2f}' for r in runs.pair_ratios(name))})")

    # vLLM's file beside the console's own, in one comparison: the same table, both sources.
    capsys.readouterr()
    rc = console_main(["bench", "compare", str(tmp_path / "pair-0-vllm.json"),
                       str(tmp_path / "pair-0-console.json")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "from vllm bench serve's result file" in out, out
    assert "timings as vllm bench serve takes them" in out, out
    row = [ln for ln in out.splitlines() if ln.lstrip().startswith("1 ")][-1]
    speedup = float(row.split("x")[1].split()[0])
    (point,) = runs.console[0]["points"]
    assert speedup == pytest.approx(point["output_tok_s"] / runs.vllm[0]["output_throughput"],
                                    abs=0.006)
