"""`console replay --print/--json` on the fast path: the same text as the per-event printer, a
closed pipe ends it quietly, and no TUI without a terminal."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from console.commands.replay import print_session
from console.printer import human_line
from console.session import SessionReader, SessionWriter
from remote.events import Event, JobLines, utc_now

REPO = Path(__file__).resolve().parents[1]


def _awkward_events() -> list[Event]:
    t0 = utc_now()
    ts = [t0 + timedelta(milliseconds=7 * i) for i in range(40)]
    return [
        Event("job.line", "box", {"run_id": "20261202-120000-a-very-long-run-id", "name": "n",
                                  "text": "plain", "offset": 1}, ts[0]),
        Event("job.line", "", {"run_id": "r", "text": "no host"}, ts[1]),
        Event("job.line", "box", {"text": "no run id"}, ts[2]),
        Event("job.line", "box", {"run_id": "r", "text": "caf\u00e9 \U0001f680 \"q\" \\ \x1b[2J"},
              ts[3]),
        Event("job.line", "box", {"run_id": "r", "text": "@@eagle3 {\"stage\":\"x\"}"}, ts[4]),
        Event("job.line", "box", {"run_id": "r", "text": 12}, ts[5]),
        Event("stats.sample", "box", {"gpus": [{"util": 1}]}, ts[6]),
        Event("stats.sample", "box", {"gpus": [], "print": True, "summary": "8 gpus idle"}, ts[7]),
        Event("stage.progress", "box", {"stage": "train", "done": 3, "total": 10, "unit": "step",
                                        "rate": 1.5}, ts[8]),
        Event("console.warning", "box", {"message": "careful"}, ts[9]),
        Event("marker", "", {"label": "here"}, ts[10]),
        Event("probe.result", "box", {"summary": "ok"}, ts[11]),
        Event("probe.result", "box", {"x": "y" * 300}, ts[12]),
        Event("job.line", "box", {"run_id": None, "text": "null run id"}, ts[13]),
    ]


def _session(tmp_path: Path, events: list[Event]) -> Path:
    path = tmp_path / "s.jsonl"
    with SessionWriter(path, ["box"]) as w:
        for e in events:
            w.write(e)
        w.write_many(JobLines("box", "run-1", "train", [f"line {i}" for i in range(500)],
                              list(range(500)), events[-1].ts))
    return path


def test_fast_human_lines_are_the_printers_lines(tmp_path: Path) -> None:
    path = _session(tmp_path, _awkward_events())
    with SessionReader(path) as r:
        expected = []
        for e in r.events():
            try:
                line = human_line(e)
            except TypeError:  # None run_id: the per-event printer cannot format it
                line = f"{e.ts:%H:%M:%S} [{e.host}] | {e.payload['text']}"
            if line is not None:
                expected.append(line)
        out = io.BytesIO()
        assert print_session(r, out, as_json=False) == []  # type: ignore[arg-type]
    assert out.getvalue().decode("utf-8").splitlines() == expected


def test_fast_json_lines_are_the_events_json(tmp_path: Path) -> None:
    path = _session(tmp_path, _awkward_events())
    with SessionReader(path) as r:
        expected = [e.to_json() for e in r.events()]
        out = io.BytesIO()
        assert print_session(r, out, as_json=True) == []  # type: ignore[arg-type]
    assert out.getvalue().decode("utf-8").splitlines() == expected


def _big_session(tmp_path: Path, n_blocks: int = 400) -> Path:
    path = tmp_path / "big.jsonl"
    t0 = utc_now()
    with SessionWriter(path, ["box"]) as w:
        for b in range(n_blocks):
            w.write_many(JobLines("box", "run-1", "train", [f"step {b}.{i}" for i in range(500)],
                                  list(range(500)), t0 + timedelta(seconds=b)))
    return path


def test_a_closed_pipe_ends_replay_quietly_with_exit_0(tmp_path: Path) -> None:
    path = _big_session(tmp_path)
    # A torn last line: its warning is printed after the last event, so a replay that kept
    # going to the end after the pipe closed would say so on stderr.
    with open(path, "ab") as fh:
        fh.write(b'{"ts":"2026-')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for extra in ([], ["--json"]):
        proc = subprocess.Popen([sys.executable, "-m", "console", "replay", str(path), "--print",
                                 *extra], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert proc.stdout is not None and proc.stderr is not None
        first = [proc.stdout.readline() for _ in range(2)]
        assert all(first)
        proc.stdout.close()  # `| head -2`
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0, err
        assert err == "", err  # no traceback, no "Exception ignored ... BrokenPipeError"


def test_replay_without_a_terminal_never_opens_the_tui(tmp_path: Path) -> None:
    path = _session(tmp_path, _awkward_events())
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "console", "replay", str(path), *args],
                              cwd=REPO, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=60)

    as_json = run("--json")
    assert as_json.returncode == 0, as_json.stderr
    assert [Event.from_json(ln).kind for ln in as_json.stdout.splitlines()][:2] == ["job.line"] * 2
    tui = run()
    assert tui.returncode == 2
    assert "needs a terminal" in tui.stderr and "--print" in tui.stderr
