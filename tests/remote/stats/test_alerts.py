"""Alerts (issue 53): the rule table judges a host's samples, once per incident, silent on a
healthy stream; headless, each incident is one ALERT line (the real `console stats`, the real
sampler, NVML through its test double)."""

from __future__ import annotations

import io
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from console.printer import Printer
from remote.errors import ConfigError
from remote.link.hosts import ALERT_KEYS, parse_config
from remote.link.transport import LocalTransport
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.stats.alerts import RULES, AlertConfig, AlertWatch
from remote.stats.stream import StatsStream
from tests.health_scenario import ALERTS_TOML, Box
from tests.local_box import local_console_toml

ROOT = Path(__file__).parents[3]


def _gpu(i: int, **health: Any) -> dict[str, Any]:
    return {"index": i, "util": 50, "clock_reasons": [], "ecc_uncorrected_volatile": 0, "xid": [], **health}


def test_the_rule_table_fires_once_per_incident_and_stays_silent_when_healthy() -> None:
    w = AlertWatch(AlertConfig(brake_seconds=5, stall_minutes=1))
    healthy = {"gpus": [_gpu(0), _gpu(1)]}
    assert not [a for t in range(100) for a in w.sample(healthy, float(t))]
    fired: list[dict[str, Any]] = []
    t = 100.0

    def run(payload: dict[str, Any], n: int = 1) -> None:
        nonlocal t
        for _ in range(n):
            t += 1
            fired.extend(w.sample(payload, t))

    run({"gpus": [_gpu(0, ecc_uncorrected_volatile=2), _gpu(1)]}, 5)  # one increase, held
    run({"gpus": [_gpu(0, ecc_uncorrected_volatile=3), _gpu(1)]})  # a second increase: a new one
    assert [a["rule"] for a in fired] == ["ecc_uncorrected"] * 2 and fired[1]["value"] == 3
    fired.clear()
    run({"gpus": [_gpu(0, ecc_uncorrected_volatile=3, xid=[79]), _gpu(1)]})
    run({"gpus": [_gpu(0, ecc_uncorrected_volatile=3), _gpu(1)]}, 3)
    assert [(a["rule"], a["gpu"], a["value"]) for a in fired] == [("xid", 0, 79)]
    fired.clear()
    braking = {"gpus": [_gpu(0, ecc_uncorrected_volatile=3, clock_reasons=["hw_power_brake_slowdown"]), _gpu(1)]}
    run(braking, 4)  # under 5 s: nothing
    assert not fired
    run(braking, 20)  # held: once
    run({"gpus": [_gpu(0, ecc_uncorrected_volatile=3, clock_reasons=["sw_power_cap"]), _gpu(1)]}, 2)
    run(braking, 6)  # braking again, past 5 s: a new incident
    assert [a["rule"] for a in fired] == ["brake", "brake"]
    fired.clear()
    run({"gpus": [_gpu(0, ecc_uncorrected_volatile=3)]}, 10)  # GPU 1 gone: once
    assert [(a["rule"], a["gpu"]) for a in fired] == [("gpu_missing", 1)]
    fired.clear()
    w.stage("stage.start", {"stage": "extract"}, t)
    run(healthy, 30)
    w.stage("stage.progress", {"stage": "extract"}, t)  # moving: nothing
    run(healthy, 59)
    assert not fired
    run(healthy, 30)  # still past one minute: once
    assert [(a["rule"], a["stage"]) for a in fired] == [("stage_stalled", "extract")]
    w.stage("stage.end", {"stage": "extract"}, t)
    run(healthy, 200)
    assert len(fired) == 1
    # every alert says what it means and what to do, from the one table
    assert all(a["advice"] == RULES[a["rule"]].advice and a["meaning"] for a in fired)


def test_a_field_the_driver_lacks_raises_nothing() -> None:
    """No ECC counter, no clock reasons, no Xid list: absent is not 0 and not an incident."""
    w = AlertWatch(AlertConfig(brake_seconds=1))
    out = [a for t in range(50) for a in w.sample({"gpus": [{"index": 0, "util": 10}]}, float(t))]
    assert out == []


def test_alert_thresholds_come_from_console_toml() -> None:
    cfg = parse_config('[alerts]\nbrake_seconds = 30\nstall_minutes = 5\n', "<string>")
    assert AlertConfig.of(cfg.alerts) == AlertConfig(brake_seconds=30.0, stall_minutes=5.0)
    assert AlertConfig.of(parse_config("", "<string>").alerts) == AlertConfig()
    assert set(ALERT_KEYS) == set(AlertConfig.__dataclass_fields__)
    with pytest.raises(ConfigError, match=r"alerts\.brake_seconds.*positive"):
        parse_config("[alerts]\nbrake_seconds = -1\n", "<string>")
    with pytest.raises(ConfigError, match=r"alerts\.nope.*unknown key"):
        parse_config("[alerts]\nnope = 1\n", "<string>")


def test_every_rule_is_documented_in_the_readme_and_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    health = (ROOT / "docs" / "health.md").read_text()
    for name in RULES:
        assert f"`{name}`" in readme and f"`{name}`" in health, name


def test_a_stalled_stage_is_one_headless_line(tmp_path: Path) -> None:
    """The stream judges its samples against the stage events of the same bus."""
    bus = EventBus()
    out = io.StringIO()
    bus.add_callback(Printer(out=out))
    from remote.link.hosts import HostConfig

    stream = StatsStream(LocalTransport(), HostConfig(name="box"), bus, interval=0.1,
                         alerts=AlertConfig(stall_minutes=0.001))  # 60 ms
    remove = bus.add_callback(stream._on_event)
    line = '{"type": "sample", "source": "nvml", "host": {}, "gpus": [{"index": 0, "util": 5}]}'
    bus.emit(ev.STAGE_START, "box", stage="train")
    bus.emit(ev.STAGE_START, "other-box", stage="extract")  # another host's stage: not ours
    for _ in range(3):
        time.sleep(0.05)
        stream._handle(line)
    time.sleep(0.1)
    for _ in range(5):
        stream._handle(line)
    bus.emit(ev.STAGE_PROGRESS, "box", stage="train", done=1, total=9)
    stream._handle(line)
    remove()
    alerts = [x for x in out.getvalue().splitlines() if "ALERT" in x]
    assert len(alerts) == 1 and "[box] ALERT stage_stalled: stage train: no progress" in alerts[0]
    assert RULES["stage_stalled"].advice in alerts[0]


class _Lines:
    """A child's stdout, line by line, waited on by condition (never by clock)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def until(self, cond: Callable[[list[str]], bool], timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while not cond(self.lines):
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError("not seen in time:\n" + "\n".join(self.lines[-20:]))
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError("the command ended:\n" + "\n".join(self.lines[-20:]))
            self.lines.append(line)


def _samples(lines: list[str]) -> int:
    return sum("stats.sample:" in x for x in lines)


def _alerts(lines: list[str], rule: str | None = None) -> list[str]:
    return [x for x in lines if "ALERT " in x and (rule is None or f"ALERT {rule}:" in x)]


def test_console_stats_prints_each_incident_once(tmp_path: Path) -> None:
    box = Box(tmp_path / "nvml.json")
    cfg = local_console_toml(tmp_path, python=sys.executable)
    cfg.write_text(cfg.read_text() + ALERTS_TOML)
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", "stats", "--host", "local", "--interval", "0.1",
         "--config", str(cfg), "--session", str(tmp_path / "s.jsonl")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        env={**os.environ, **box.env()})
    out = _Lines(proc)
    try:
        out.until(lambda ls: _samples(ls) >= 20)  # two healthy seconds
        assert not _alerts(out.lines)
        box.ecc(2)
        out.until(lambda ls: bool(_alerts(ls, "ecc_uncorrected")))
        box.xid(79)
        out.until(lambda ls: bool(_alerts(ls, "xid")))
        box.brake(True)
        out.until(lambda ls: bool(_alerts(ls, "brake")))
        n = _samples(out.lines)
        out.until(lambda ls: _samples(ls) >= n + 10)  # still braking: no second line
        box.brake(False)
        box.lose_gpu(1)
        out.until(lambda ls: bool(_alerts(ls, "gpu_missing")))
        n = _samples(out.lines)
        out.until(lambda ls: _samples(ls) >= n + 15)
    finally:
        proc.terminate()
        proc.wait(30)
    assert [len(_alerts(out.lines, r)) for r in ("ecc_uncorrected", "xid", "brake", "gpu_missing")] == [1] * 4
    assert len(_alerts(out.lines)) == 4
    assert "GPU 0: uncorrected ECC errors 0 -> 2" in _alerts(out.lines, "ecc_uncorrected")[0]
    assert "GPU 0: Xid 79" in _alerts(out.lines, "xid")[0]
    assert "GPU 1 is missing" in _alerts(out.lines, "gpu_missing")[0]
    # the recorded session has them as events: replay --print shows the same lines
    replay = subprocess.run([sys.executable, "-m", "console", "replay", str(tmp_path / "s.jsonl"), "--print"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert [x.split("] ", 1)[1] for x in _alerts(replay.stdout.splitlines())] == \
        [x.split("] ", 1)[1] for x in _alerts(out.lines)]
