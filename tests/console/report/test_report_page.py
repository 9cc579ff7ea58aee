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
    assert "<td>loss 0.4926, epoch 7</td>" in page
    assert "<td>mean_length 1.452</td>" in page  # not the head last measured, nor per position
    assert page.index("<td>demo-setup</td>") < page.index("<td>train</td>")  # as they ran
    assert "# stage train (done, run r-1)\n/box/py -m pipeline train --config " \
           "&#x27;/box/demo/pipeline toml&#x27;" in page  # quoted as a shell would need it
    assert "/box/py -m pipeline run --demo-dir /box/demo" in page  # the runner job itself
