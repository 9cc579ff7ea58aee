"""The matrix as data: speedup and its spread, the recommendation lines, the result file
(saved, read back, continued) and the plan's options; no engine (the engine test is
tests/e2e/test_bench_matrix_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.cli import main as console_main
from console.matrix_tables import matrix_report, plan_text
from remote.bench.matrix import (
    Cell,
    MatrixPlan,
    MatrixResult,
    estimate_seconds,
    load_matrix,
    parse_drafts,
    parse_list,
    save_matrix,
)
from remote.bench.results import Point, load_result, save_result
from remote.errors import ResultFileError, UsageError


def _plan(**kw: object) -> MatrixPlan:
    base = dict(drafts=["none", "ngram", "pipeline"], ks=[1, 3], temperatures=[0.0, 0.7],
                concurrencies=[1, 4], max_tokens=10, requests=4, rounds=2, prompts="p",
                prompts_sha256="abc")
    base.update(kw)
    return MatrixPlan(**base)  # type: ignore[arg-type]


def _point(c: int, tok_s: float, *, accepted: float | None = None) -> Point:
    """One round: 10 tokens per request, 2 requests, at `tok_s`."""
    acc = None
    if accepted is not None:
        acc = {"drafts": 10.0, "draft_tokens": 30.0, "accepted": accepted,
               "accepted_per_pos": [accepted / 2, accepted / 2, 0.0], "rate": accepted / 30,
               "mean_length": 1 + accepted / 10, "per_position": []}
    return Point(c, 2, 0, 20, 20 / tok_s, tok_s, 2 / (20 / tok_s), 0.1, 0.2, 0.01, 0.02,
                 acceptance=acc, ttfts=[0.1, 0.2], latencies=[1.0, 1.1], output_lens=[10, 10])


def _filled(plan: MatrixPlan, speed: dict[tuple[str, int], float]) -> MatrixResult:
    """Every cell: the baseline at 100 tok/s (both rounds), a draft at speed x 100 in one round
    and speed x 100 x 1.1 in the other."""
    m = MatrixResult(plan, host="box", model="m")
    for d, k in plan.servers():
        for key in plan.cell_keys(d, k):
            c = key[3]
            x = 1.0 if d == "none" else speed[(d, k)]
            acc = None if d == "none" else 12.0
            m.cells[key] = Cell(d, k, key[2], c, [_point(c, 100 * x, accepted=acc),
                                                  _point(c, 110 * x, accepted=acc)])
    return m


def test_speedup_spread_and_recommendations() -> None:
    plan = _plan(concurrencies=[1])
    m = _filled(plan, {("ngram", 1): 0.8, ("ngram", 3): 0.9, ("pipeline", 1): 1.2,
                       ("pipeline", 3): 1.4})
    base_tok_s = m.baseline(0.0, 1).figures()["tok_s"]  # type: ignore[union-attr]
    assert base_tok_s == pytest.approx(2 * 20 / (20 / 100 + 20 / 110))
    cell = m.cells[("pipeline", 3, 0.0, 1)]
    speedup, lo, hi = m.speedup(cell)
    assert speedup == pytest.approx(1.4)
    assert lo == pytest.approx(140 / base_tok_s) and hi == pytest.approx(154 / base_tok_s)
    f = cell.figures()
    assert f["acceptance_length"] == pytest.approx(1 + 24 / 20)  # two rounds summed
    assert f["acceptance_rate"] == pytest.approx(24 / 60)
    assert f["tpot_p50"] == pytest.approx(0.9 / 9)
    assert m.recommendations() == ["c=1: eagle3 K=3 1.40x (n-gram K=3 0.90x) [T=0,0.7]"]
    slow = _filled(_plan(concurrencies=[4], temperatures=[0.0], drafts=["none", "ngram"]),
                   {("ngram", 1): 0.8, ("ngram", 3): 0.9})
    assert slow.recommendations() == ["c=4: none (no speculation pays; best n-gram K=3 0.90x)"]


def test_a_head_directory_is_named_by_its_folder() -> None:
    m = _filled(_plan(drafts=["none", "/models/heads/head2/"], ks=[2], temperatures=[0.0],
                      concurrencies=[1]), {("/models/heads/head2/", 2): 1.1})
    assert m.recommendations() == ["c=1: head2 K=2 1.10x"]


def test_result_file_round_trip_and_continue(tmp_path: Path) -> None:
    plan = _plan()
    m = _filled(plan, {("ngram", 1): 0.8, ("ngram", 3): 0.9, ("pipeline", 1): 1.2,
                       ("pipeline", 3): 1.4})
    # stopped halfway: the pipeline's cells are not measured yet
    for key in [k for k in m.cells if k[0] == "pipeline"]:
        del m.cells[key]
    m.time_split = {"wall": 100.0, "engine_start": 60.0, "warmup": 5.0, "measured": 30.0,
                    "rest": 5.0}
    path = save_matrix(tmp_path / "m.json", m)
    back = load_matrix(path)
    assert back.plan == plan and not back.complete
    assert set(back.cells) == set(m.cells)
    assert back.rows() == m.rows()
    assert len(back.missing()) == 2 * 2 * 2  # pipeline x K x T x c
    assert {k[0] for k in back.missing()} == {"pipeline"}
    text = matrix_report(back)
    assert "not measured: 8 cells (eagle3 K=1, eagle3 K=3)" in text
    assert "the rest 5 s (5%)" in text
    assert "c=1: n-gram K=3 0.90x" not in text  # none pays: the line says so
    assert "c=1: none (no speculation pays; best n-gram K=3 0.90x) [T=0,0.7]" in text
    # a bench result reader says what the file is instead of misreading it
    with pytest.raises(ResultFileError, match="not a bench result"):
        load_result(path)
    with pytest.raises(ResultFileError, match="not a bench matrix"):
        load_matrix(save_result(tmp_path / "r.json", None))


def test_estimate_counts_engine_starts_and_windows() -> None:
    plan = _plan(drafts=["none", "pipeline"], ks=[3], temperatures=[0.0], concurrencies=[1, 4],
                 requests=4, rounds=2, max_tokens=10)
    todo = [(d, k, t, c) for d, k in plan.servers() for _, _, t, c in plan.cell_keys(d, k)]
    # 2 servers x 60 s; c=1: 2 rounds x 2 requests x 10 tokens / 20 tok/s, c=4: 2 x 4 x 10 / 80
    assert estimate_seconds(plan, todo) == pytest.approx(2 * 60 + 2 * (2.0 + 1.0))


def test_option_lists() -> None:
    assert parse_drafts("pipeline,ngram,pipeline") == ["none", "pipeline", "ngram"]
    assert parse_drafts("none,ngram") == ["none", "ngram"]
    pinned = _plan(drafts=parse_drafts("ngram,/h/a@b,/h/head2@3"), ks=[1, 2])
    assert pinned.servers() == [("none", 0), ("ngram", 1), ("ngram", 2), ("/h/a@b", 1),
                                ("/h/a@b", 2), ("/h/head2", 3)]
    for bad in ("none@2", "head@0"):
        with pytest.raises(UsageError):
            parse_drafts(bad)
    assert parse_list("0, 0.7,0", "--temperature", float) == [0.0, 0.7]
    for text, kind in (("1,x", int), ("0", int), ("-1", float), ("nan", float), ("", int)):
        with pytest.raises(UsageError):
            parse_list(text, "--k", kind)


def test_matrix_cli_refuses_bad_input_in_one_line(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "console.toml"
    cfg.write_text("")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something"}))
    for extra, message in (([], "give --pipeline FILE or --demo"),
                           (["--demo", "--k", "0"], "--k '0': '0' is out of range"),
                           (["--demo", "--temperature", "hot"], "is not a number"),
                           (["--demo", "--out", str(other)], "holds something else")):
        rc = console_main(["bench", "matrix", "--host", "local", "--config", str(cfg),
                           "--no-record", *extra])
        err = capsys.readouterr().err
        assert rc == 2, (extra, err)
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert json.loads(other.read_text()) == {"format": "something"}  # nothing lost


def test_category_speedup_per_cell() -> None:
    """Rounds measured by category: each draft cell's category speedup is over the baseline's
    same category, its acceptance length that category's own."""
    plan = _plan(drafts=["none", "pipeline"], ks=[3], temperatures=[0.0], concurrencies=[1])
    m = _filled(plan, {("pipeline", 3): 1.2})

    def cats(chat: float, code: float, acc: bool) -> dict[str, dict[str, object]]:
        a = {"drafts": 10.0, "draft_tokens": 30.0, "accepted": 10.0, "accepted_per_pos": [10.0]}
        return {"chat": {"output_tokens": 10, "duration": 10 / chat,
                         "acceptance": a if acc else None},
                "code": {"output_tokens": 10, "duration": 10 / code,
                         "acceptance": a if acc else None}}

    for p in m.cells[("none", 0, 0.0, 1)].rounds:
        p.categories = cats(100.0, 100.0, False)
    for p in m.cells[("pipeline", 3, 0.0, 1)].rounds:
        p.categories = cats(150.0, 90.0, True)
    ((cell, figs),) = m.category_rows()
    assert cell.name == "eagle3 K=3"
    assert figs["chat"]["speedup"] == pytest.approx(1.5)
    assert figs["code"]["speedup"] == pytest.approx(0.9)
    assert figs["code"]["acceptance_length"] == pytest.approx(2.0)
    assert "eagle3 K=3 T=0 c=1: chat 1.50x (2.00), code 0.90x (2.00)" in matrix_report(m)


def test_a_cell_with_failed_requests_is_said_with_its_reason(tmp_path: Path) -> None:
    """The table's N counts failed requests; the report names the cell, how many and why, also
    when read back from the file (`bench compare`)."""
    plan = _plan(drafts=["none", "pipeline"], ks=[1], temperatures=[0.7], concurrencies=[4])
    m = _filled(plan, {("pipeline", 1): 1.2})
    bad = m.cells[("pipeline", 1, 0.7, 4)].rounds[1]
    bad.failed, bad.errors = 1, ["HTTP 500: boom"]
    assert "failed requests" not in matrix_report(_filled(plan, {("pipeline", 1): 1.2}))
    for m2 in (m, load_matrix(save_matrix(tmp_path / "m.json", m))):
        lines = [ln for ln in matrix_report(m2).splitlines() if ln.startswith("failed")]
        assert lines == ["failed requests: eagle3 K=1 T=0.7 c=4: 1 of 4 (HTTP 500: boom)"]


def test_the_plan_line_says_the_requests_a_cell_really_sends(tmp_path: Path) -> None:
    """Each round sends the same count, at least the concurrency: --requests 4 in 3 rounds is
    3 rounds of 2 (6) at c=1 and of 4 (12) at c=4, which the table's N then shows."""
    def line(**kw: object) -> str:
        plan = _plan(**kw)
        return plan_text(plan, MatrixResult(plan), 60.0, tmp_path / "m.json")

    assert "8 requests per cell in 2 rounds" in line(requests=8, rounds=2)
    assert "6 (c=1), 12 (c=4) requests per cell in 3 rounds" in line(requests=4, rounds=3)
    assert "6 requests per cell in 3 rounds" in line(requests=4, rounds=3, concurrencies=[1])
