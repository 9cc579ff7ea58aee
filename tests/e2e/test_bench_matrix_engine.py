"""`console bench matrix` on the real vLLM (the box environment, over the loopback sshd): the
only test of the matrix that starts engines, one after another (5: none, n-gram pinned at K=3,
the demo head at every --k (1, 3), a second head given as a directory at K=2). The K axis is the
demo head's; the n-gram at a second K cost an engine start and four cells, and showed nothing
the pinned @K of the n-gram and the directory do not (the suite's 30-minute rule).

What is asserted and why it can fail:
- every cell of {none, n-gram, demo head x2, second head} x {T=0, T=0.7} x {c=1, c=4} is
  measured (n-gram and sampling are served by vLLM 0.32's CPU build: docs/design.md §12), the
  table and one `c=N:` line per concurrency are printed, and `bench compare` reads the file back
  to the same lines;
- the demo head's acceptance length at T=0 is above an untrained head's 1.0 (a head served
  off by a layer, or not loaded, sits at ~1.0);
- while the n-gram K=3 and the head-directory K=2 servers are up (a hook before their cells),
  what `serve start --draft D --k K` promises of them, checked here so that no other test starts
  an engine for it (they were tests/remote/serving/test_engine_drafts.py's own two engines):
  the engine's --speculative-config (ngram with our lookup sizes; eagle3 with that directory,
  2 tokens), the head probe's verdict, `bench run`'s acceptance from vLLM's counters (n-gram:
  up to 3 tokens a draft, 3 positions; the head: 2 a draft, above an untrained head's 1.1),
  vLLM's spec-decode counters in /metrics, `serve status` reading the head and K back from
  served.json; each server gone once the matrix is done;
- the time split accounts for the whole wall time (engine starts, warm-up, measured windows
  and "the rest", none negative) and is printed; its figure ("the rest" under 20 %) is
  measured and recorded in docs/measurements.md, not asserted: tests never assert timings;
- run again, the same command keeps every cell and starts no engine.
And, on the session's shared server (no engine of its own): the matrix's cell for the demo head
at K=3, T=0 measures the same output tokens and acceptance as `console bench run` with the
same prompts and requests; and `bench run` with a prompt file of two categories gives each
its own acceptance window.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from console.cli import main as console_main
from pipeline.serve import NGRAM_LOOKUP
from remote.bench.client import VllmClient
from remote.bench.driver import resolve_model
from remote.bench.matrix import Cell, MatrixPlan, load_matrix
from remote.bench.prompts import PromptSet, load_prompts
from remote.bench.results import load_result
from remote.ops import matrix as matrix_ops
from remote.ops.matrix import measure_cells
from remote.spine import events as ev
from tests.engine_fixture import EngineBox, answers, events, metrics, served_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

UNTRAINED = 1.0  # mean acceptance length of a head that never agrees with the target
SERVED_MARGIN = 1.1  # as tests/remote/serving/test_engine_serve.py: untrained ~1.0


async def _matrix_cell(url: str, plan: MatrixPlan, prompts: PromptSet) -> Cell:
    cells: list[Cell] = []
    async with VllmClient(url) as client:
        model = await resolve_model(client, None)
        await measure_cells(client, model, plan, prompts, [("pipeline", 3, 0.0, 1)],
                            on_cell=cells.append)
    return cells[0]


def test_matrix_cell_agrees_with_bench_run_on_the_same_server(
        served_engine: EngineBox, tmp_path: Path) -> None:
    """On the demo's head at K=3 (its train/speculative_config.json), the session's server."""
    prompts_file = served_engine.out / "prepare" / "eval.jsonl"
    prompts = load_prompts(prompts_file)
    plan = MatrixPlan(drafts=["none", "pipeline"], ks=[3], temperatures=[0.0],
                      concurrencies=[1], max_tokens=16, requests=6, rounds=2,
                      prompts=prompts.name, prompts_sha256=prompts.sha256, ignore_eos=False)
    cell = asyncio.run(_matrix_cell(served_engine.url, plan, prompts))
    out = tmp_path / "run.json"
    assert served_engine.cli("bench", "run", "--concurrency", "1", "--requests", "6",
                             "--max-tokens", "16", "--stop-at-eos", "--warmup", "0",
                             "--prompts", str(prompts_file), "--out", str(out)) == 0
    point = load_result(out).run.points[0]
    f = cell.figures()
    # the same six requests (prompts 0-5, greedy) in the same order, one at a time
    assert f["requests"] == point.requests == 6
    assert f["output_tokens"] == point.output_tokens > 0
    acc = point.acceptance
    assert acc is not None and f["acceptance"] is not None
    assert f["acceptance"]["drafts"] == pytest.approx(acc["drafts"], rel=0.05)
    assert f["acceptance_length"] == pytest.approx(acc["mean_length"], abs=0.05)
    assert f["acceptance_rate"] == pytest.approx(acc["rate"], abs=0.03)
    assert f["acceptance_length"] > UNTRAINED


def test_acceptance_per_category_on_the_real_server(served_engine: EngineBox, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A prompt file with two categories: `bench run` measures a window per category on the
    real server; each has its own acceptance from vLLM's counters, and the two add up to the
    point's."""
    rows = [json.loads(line) for line in
            (served_engine.out / "prepare" / "eval.jsonl").read_text().splitlines() if line.strip()]
    prompts = tmp_path / "cats.jsonl"
    prompts.write_text("".join(json.dumps({**row, "category": ("chat", "code")[i % 2]}) + "\n"
                               for i, row in enumerate(rows[:8])))
    out = tmp_path / "cats.json"
    capsys.readouterr()
    assert served_engine.cli("bench", "run", "--concurrency", "1", "--requests", "4",
                             "--max-tokens", "16", "--warmup", "0", "--prompts", str(prompts),
                             "--out", str(out)) == 0
    text = capsys.readouterr().out
    point = load_result(out).run.points[0]
    assert point.categories is not None and set(point.categories) == {"chat", "code"}
    drafts = [point.categories[c]["acceptance"]["drafts"] for c in ("chat", "code")]
    assert all(d > 0 for d in drafts) and point.acceptance is not None
    assert sum(drafts) == point.acceptance["drafts"]
    assert "by category:" in text and "c=1 chat:" in text and "c=1 code:" in text


def _live_checks(box: EngineBox, tmp_path: Path, draft: str, k: int) -> dict[str, Any]:
    """What `serve start --draft D --k K` promises of the matrix's running server for (draft, k),
    gathered while it is up (asserted by the test once the matrix is done): the engine's
    --speculative-config, `bench run`'s point, /metrics and, for a head, `serve status`'s
    readiness events. Consoles of their own (cli_process): the matrix's holds this process."""
    name = f"{'ngram' if draft == 'ngram' else 'head'}-k{k}"
    out = tmp_path / f"{name}.json"
    rounds, eos = ("2", []) if draft == "ngram" else ("4", ["--stop-at-eos"])
    seen: dict[str, Any] = {"spec": served_spec(box)}
    seen["bench_rc"] = box.cli_process(
        "bench", "run", "--concurrency", "1", "--rounds", rounds, "--max-tokens", "24", *eos,
        "--warmup", "1", "--prompts", str(box.out / "prepare" / "eval.jsonl"), "--out", str(out))
    seen["point"] = json.loads(out.read_text())["run"]["points"] if out.exists() else None
    seen["metrics"] = metrics(box.url)
    if draft != "ngram":
        status = tmp_path / f"{name}-status.jsonl"
        seen["status_rc"] = box.cli_process("serve", "status", session=status)
        seen["status_ready"] = [e.payload for e in events(status) if e.kind == ev.SERVE_READY]
    return seen


def test_matrix_over_drafts_k_temperature_and_concurrency(engine_box: EngineBox,
                                                           tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    engine_box.release()  # the matrix starts and stops its own servers at the host's vllm_url
    spec = json.loads((engine_box.out / "train" / "speculative_config.json").read_text())
    head2 = engine_box.workdir / "heads" / "head2"
    shutil.copytree(spec["model"], head2)  # a head already on the box, given as a directory
    live: dict[tuple[str, int], dict[str, Any]] = {}
    measure = matrix_ops.measure_cells

    async def checked_then_measured(client: VllmClient, model: str,
                                    plan: MatrixPlan, prompts: PromptSet,
                                    keys: Sequence[tuple[str, int, float, int]], *,
                                    on_cell: Callable[[Cell], None]) -> None:
        server = (keys[0][0], keys[0][1])
        if server in (("ngram", 3), (str(head2), 2)):
            try:
                live[server] = await asyncio.to_thread(_live_checks, engine_box, tmp_path,
                                                       *server)
            except Exception:  # said by the test, not swallowed by the console's error path
                live[server] = {"error": traceback.format_exc()}
        await measure(client, model, plan, prompts, keys, on_cell=on_cell)

    monkeypatch.setattr(matrix_ops, "measure_cells", checked_then_measured)
    out = tmp_path / "matrix.json"
    argv = ["bench", "matrix", "--demo", "--drafts", f"none,ngram@3,pipeline,{head2}@2",
            "--k", "1,3", "--temperature", "0,0.7", "--concurrency", "1,4", "--requests", "4",
            "--rounds", "2", "--max-tokens", "16", "--out", str(out)]
    capsys.readouterr()
    session = tmp_path / "matrix.jsonl"
    assert engine_box.cli(*argv, session=session) == 0
    text = capsys.readouterr().out
    m = load_matrix(out)
    assert m.complete and not m.missing()
    names = ["none", "n-gram K=3", "eagle3 K=1", "eagle3 K=3", "head2 K=2"]
    assert [name for name in m.engine_starts] == names
    rows = m.rows()
    assert len(rows) == len(names) * 2 * 2
    for r in rows:
        assert r["requests"] >= 4 and r["failed"] == 0 and r["tok_s"] > 0, r
        assert r["ttft_p50"] is not None and r["tpot_p99"] is not None, r
        if r["draft"] != "none":
            assert r["speedup"] is not None and r["speedup_min"] <= r["speedup_max"], r
    for r in rows:
        if r["name"] in ("eagle3 K=3", "head2 K=2") and r["temperature"] == 0.0:
            assert r["acceptance_length"] > UNTRAINED, r
    sampled = [c for c in m.cells.values() if c.temperature == 0.7]
    assert all(p.ttfts for c in sampled for p in c.rounds)
    recs = [line for line in text.splitlines() if line.startswith("c=")]
    assert [line.split(":")[0] for line in recs] == ["c=1", "c=4"], text
    assert recs == m.recommendations()
    assert "ACC LEN" in text and "SPEEDUP" in text and f"result: {out}" in text
    split = m.time_split
    parts = [v for k, v in split.items() if k != "wall"]
    assert all(v >= 0 for v in parts) and sum(parts) == pytest.approx(split["wall"], rel=1e-3), split
    assert "the rest" in text
    cells = [e for e in events(session) if e.kind == ev.BENCH_MATRIX and e.payload["phase"] == "cell"]
    assert len(cells) == len(rows) and "ETA" in cells[0].payload["summary"]
    _assert_served_drafts(engine_box, session, live, head2)

    # read back by bench compare: the same lines
    assert console_main(["--no-record", "bench", "compare", str(out)]) == 0  # a file: no host
    shown = capsys.readouterr().out
    assert [line for line in shown.splitlines() if line.startswith("c=")] == recs

    # the same command again: every cell kept, no engine started
    again = tmp_path / "again.jsonl"
    assert engine_box.cli(*argv, session=again) == 0
    assert not [e for e in events(again) if e.kind == ev.SERVE_STARTING]
    assert load_matrix(out).rows() == rows


def _assert_served_drafts(box: EngineBox, session: Path, live: dict[tuple[str, int], dict[str, Any]],
                          head2: Path) -> None:
    """The n-gram K=3 and head-directory K=2 servers of the matrix, as `serve start --draft D
    --k K` promises them (formerly tests/remote/serving/test_engine_drafts.py's own engines)."""
    evs = events(session)
    probes = [e.payload for e in evs if e.kind == ev.PROBE_RESULT]
    assert set(live) == {("ngram", 3), (str(head2), 2)}, live
    assert not [v["error"] for v in live.values() if "error" in v], live

    # ngram: vLLM's prompt lookup, which this CPU build serves, with our lookup sizes
    ngram = live[("ngram", 3)]
    assert ngram["spec"] == {"method": "ngram", "num_speculative_tokens": 3, **NGRAM_LOOKUP}
    checked = [p for p in probes if p["result"]["method"] == "ngram"]
    assert checked and all(p["result"]["ok"] for p in checked), checked
    assert ngram["bench_rc"] == 0
    (point,) = ngram["point"]
    acc = point["acceptance"]  # vLLM's counters; a lookup drafts up to K tokens, fewer
    assert acc is not None and acc["drafts"] > 0, acc  # when its match is short
    assert acc["drafts"] <= acc["draft_tokens"] <= 3 * acc["drafts"], acc
    assert len(acc["per_position"]) == 3, acc
    assert "vllm:spec_decode_num_drafts" in ngram["metrics"]

    # a head given as a directory, at K=2: it drafts two positions and beats an untrained head
    head = live[(str(head2), 2)]
    (ready,) = [e.payload for e in evs if e.kind == ev.SERVE_READY
                and e.payload.get("draft") == str(head2)]
    assert ready["k"] == 2, ready
    checked = [p for p in probes if p["result"].get("head_dir") == str(head2)]
    assert checked and all(p["probe"] == "head" and p["result"]["ok"] for p in checked), checked
    assert head["spec"] == {"method": "eagle3", "model": str(head2),
                            "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1}
    assert head["bench_rc"] == 0
    (point,) = head["point"]
    acc = point["acceptance"]
    assert acc["drafts"] > 0 and len(acc["per_position"]) == 2, acc
    assert acc["draft_tokens"] == 2 * acc["drafts"], acc
    assert acc["mean_length"] > SERVED_MARGIN, acc
    assert head["status_rc"] == 0
    (found,) = head["status_ready"]
    assert (found["draft"], found["k"]) == (str(head2), 2)  # read back from served.json
    assert not answers(box.url)  # the matrix stopped its last server
