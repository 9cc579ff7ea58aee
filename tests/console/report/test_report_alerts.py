"""The report's Alerts section (issue 53): a row per recorded incident, as the stream's rule
table made them, with what to do; a healthy session says it had none."""

from __future__ import annotations

import re
from pathlib import Path

from console.report.page import render
from remote.spine import events as ev
from remote.spine.events import Event
from remote.stats.alerts import RULES, AlertConfig, AlertWatch
from tests.tui_sessions import HOST, Clock, stats_payload, write_session


def _session(path: Path, trouble: bool) -> Path:
    """Samples judged by the real rule table, its alerts recorded after each, as the stream does."""
    c = Clock()
    watch = AlertWatch(AlertConfig(brake_seconds=5, stall_minutes=1))
    events = [Event.checked(ev.STAGE_START, HOST, {"stage": "train"}, c.tick(1))]
    watch.stage(ev.STAGE_START, events[0].payload, events[0].ts.timestamp())
    for i in range(120):
        p = stats_payload(i)
        for g in p["gpus"]:
            g.update(clock_reasons=[], ecc_uncorrected_volatile=0, xid=[])
            if trouble and i >= 10:
                g0 = g["index"] == 0
                g["ecc_uncorrected_volatile"] = 1 if g0 else 0
                g["xid"] = [48] if g0 and i == 20 else []
                g["clock_reasons"] = ["hw_thermal_slowdown"] if g0 and 30 <= i < 50 else []
        if trouble and i >= 60:
            p["gpus"] = p["gpus"][:1]
        sample = Event.checked(ev.STATS_SAMPLE, HOST, p, c.tick(1))
        events.append(sample)
        if not trouble and i % 10 == 0:  # a healthy run moves
            progress = Event.checked(ev.STAGE_PROGRESS, HOST, {"stage": "train", "done": i, "total": 120}, sample.ts)
            events.append(progress)
            watch.stage(ev.STAGE_PROGRESS, progress.payload, progress.ts.timestamp())
        for alert in watch.sample(p, sample.ts.timestamp()):
            events.append(Event.checked(ev.STATS_ALERT, HOST, alert, sample.ts))
    return write_session(path, events)


def test_each_incident_is_one_row_with_what_to_do(tmp_path: Path) -> None:
    page = render(_session(tmp_path / "s.jsonl", trouble=True))
    section = page.split('<div id="alerts">', 1)[1].split("</div>", 1)[0]
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>", section)
    assert sorted(rule for _, rule, _ in rows) == sorted(RULES)
    assert ("2026-03-01 12:00:12", "ecc_uncorrected", "0") in rows
    assert ("gpu_missing", "1") in [(r, g) for _, r, g in rows]
    for rule in RULES.values():
        assert rule.advice.split(":")[0].replace("'", "&#x27;") in section


def test_a_healthy_session_has_no_alert_row(tmp_path: Path) -> None:
    page = render(_session(tmp_path / "s.jsonl", trouble=False))
    assert 'id="no-alerts"' in page and '<div id="alerts">' not in page
