"""`console report`'s page text without a browser (tests/console/report/test_report_chromium.py opens it in
one): the stage table's results and the commands that produced each stage, from events as the
box runner's stage records become them (remote/jobs/stage_records.py)."""

from __future__ import annotations

from pathlib import Path

from console.report.page import render
from remote.jobs.stage_records import stage_event
from remote.spine import events as ev
from remote.spine.events import Event
from tests.tui_sessions import HOST, Clock, write_session

TRAIN_ARGV = ["/box/py", "-m", "pipeline", "train", "--config", "/box/demo/pipeline toml"]


def _session(path: Path) -> Path:
    c = Clock()
    events = [Event.checked(ev.JOB_STARTED, HOST, {
        "run_id": "r-1", "name": "pipeline", "pid": 7, "log": "l",
        "argv": ["/box/py", "-m", "pipeline", "run", "--demo-dir", "/box/demo"]}, c.tick(1))]
    for rec in ({"type": "start", "stage": "demo-setup", "reason": "build the demo"},
                {"type": "end", "stage": "demo-setup", "ok": True, "seconds": 9.7},
                {"type": "start", "stage": "train", "reason": "no manifest", "argv": TRAIN_ARGV},
                {"type": "progress", "stage": "train", "done": 64, "total": 64, "unit": "steps",
                 "loss": 0.492581234, "epoch": 7},
                {"type": "end", "stage": "train", "ok": True, "seconds": 9.3},
                {"type": "start", "stage": "evaluate", "reason": "no manifest"},
                {"type": "progress", "stage": "evaluate", "done": 16, "total": 16,
                 "unit": "prompts", "head": "untrained"},
                {"type": "end", "stage": "evaluate", "ok": True, "seconds": 6.2,
                 "summary": {"mean_length": 1.4516129032258065, "per_position": [0.35, 0.1]}}):
        made = stage_event(rec, "r-1", str(rec["stage"]))
        assert made is not None
        events.append(Event.checked(made[0], HOST, made[1], c.tick(1)))
    return write_session(path, events)


def test_stage_results_read_as_numbers_and_each_stage_names_its_command(tmp_path: Path) -> None:
    page = render(_session(tmp_path / "s.jsonl"))
    assert "<td>loss 0.493, epoch 7</td>" in page  # 3 significant digits (render.fmt_sig)
    assert "<td>mean_length 1.45</td>" in page  # not the head last measured, nor per position
    assert page.index("<td>demo-setup</td>") < page.index("<td>train</td>")  # as they ran
    assert "# stage train (done, run r-1)\n/box/py -m pipeline train --config " \
           "&#x27;/box/demo/pipeline toml&#x27;" in page  # quoted as a shell would need it
    assert "/box/py -m pipeline run --demo-dir /box/demo" in page  # the runner job itself


def test_bench_figures_read_rounded_and_no_speedup_chart_without_a_speedup(tmp_path: Path) -> None:
    """One speculative label, no baseline: the table's figures to 3 significant digits, the
    rate as a percentage, and the throughput drawn without an empty speedup chart beside it."""
    c = Clock()
    events = [Event.checked(ev.BENCH_POINT, HOST, {
        "label": "speculative", "concurrency": conc, "output_tok_s": 94.51766890708626 * conc,
        "req_s": 0.7, "ttft_p50": 0.2, "ttft_p99": 0.4, "tpot_p50": 0.025, "tpot_p99": 0.03,
        "acceptance": {"rate": 0.06837606837606838, "mean_length": 1.2051282051282051}},
        c.tick(1)) for conc in (1, 2)]
    page = render(write_session(tmp_path / "bench.jsonl", events))
    assert "<td>speculative</td><td>1</td><td>94.5</td><td>6.84%</td><td>1.21</td>" in page
    assert "<td>189</td>" in page
    assert "94.517" not in page and "0.0683" not in page
    assert 'id="chart-throughput"' in page and 'id="chart-speedup"' not in page
    assert "<h3>Throughput vs concurrency</h3>" in page and "Speedup vs" not in page
