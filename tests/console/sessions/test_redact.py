"""Issue 33 item 3: well-known secret shapes are masked before anything records or shows them
(the bus's redactor), with their count as the session's closing record, shown by the replay's
header; `--no-redact` keeps them; the box's argv.json (the real argv, so the run can run) stays
readable by its owner only."""

from __future__ import annotations

import io
import json
import stat
import sys
from pathlib import Path

import pytest

from console.cli import main
from console.printer import Printer
from console.sessions.live import open_session
from console.sessions.reader import SessionReader
from remote.spine import events as ev
from remote.spine.events import JobLines
from remote.spine.redact import Redactor
from tests.local_box import local_console_toml

HF = "hf_" + "aB3dE6gH9jK2mN5pQ8sT1vW4"  # the shape of a hub token, not a real one
SECRETS = {
    "hf_token": (f"--token {HF}", "--token hf_***"),
    "bearer": ("Authorization: Bearer abcdefgh.ijk-lmn", "Authorization: Bearer ***"),
    "url_userinfo": ("git clone https://user:pw@example.com/r.git",
                     "git clone https://***@example.com/r.git"),
    "assignment": ("HF_TOKEN=abc123 OPENAI_API_KEY=sk-xyz aws_secret=s3cr3t sort=name",
                   "HF_TOKEN=*** OPENAI_API_KEY=*** aws_secret=*** sort=name"),
}


@pytest.mark.parametrize("kind", list(SECRETS))
def test_each_shape_is_masked_and_counted(kind: str) -> None:
    raw, masked = SECRETS[kind]
    r = Redactor()
    assert r.text(raw) == masked
    assert set(r.counts) == {kind}


def test_ordinary_text_is_left_alone_and_is_the_same_object() -> None:
    r = Redactor()
    for text in ("loss 0.42 at step 10", "hf_short", "a bearer of news", "http://host:8000/v1",
                 "MONKEY=1", "KEY=value", "see https://example.com/a@b"):
        assert r.text(text) is text, text
    payload = {"argv": ["python", "-m", "x"], "n": 3}
    assert r.value(payload) is payload
    assert r.total == 0


def test_argv_with_secrets_in_several_shapes() -> None:
    argv = ["curl", "-H", f"Authorization: Bearer {HF}", "https://user:pw@host/x",
            f"HF_TOKEN={HF}", "--plain"]
    assert Redactor().value(argv) == ["curl", "-H", "Authorization: Bearer ***", "https://***@host/x",
                                 "HF_TOKEN=***", "--plain"]


def test_the_bus_masks_a_log_block_before_the_recorder_and_the_printer(tmp_path: Path) -> None:
    out = io.StringIO()
    session = open_session(["box"], path=tmp_path / "s.jsonl", printer=Printer(out=out))
    clean = JobLines("box", "r1", "job", ["step 1", "step 2"], [7, 14])
    seen: list[object] = []
    session.bus.add_batch_callback(seen.append)
    session.bus.publish_many(clean)
    assert seen[-1] is clean  # a clean block is passed on as it is: no copy on the hot path
    session.bus.publish_many(JobLines("box", "r1", "job", ["ok", f"export HF_TOKEN={HF}"],
                                      [3, 30]))
    session.bus.emit(ev.JOB_STARTED, "box", run_id="r2", name="curl",
                     argv=["curl", "-H", f"Authorization: Bearer {HF}"])
    session.close(report=io.StringIO())
    text = (tmp_path / "s.jsonl").read_text()
    assert HF not in text and HF not in out.getvalue()
    assert "HF_TOKEN=***" in text and "Bearer ***" in text
    with SessionReader(tmp_path / "s.jsonl") as reader:
        assert reader.header.redact is True
        assert reader.redactions() == 2
        last = reader.event(len(reader) - 1)
        assert last.kind == ev.SESSION_REDACTIONS and last.payload["kinds"] == {
            "assignment": 1, "bearer": 1}


def _launch(tmp_path: Path, session: Path, *extra: str) -> int:
    local_console_toml(tmp_path)
    script = "import sys; print(' '.join(sys.argv[1:]))"
    return main(["jobs", "--host", "local", "--config", str(tmp_path / "console.toml"), "launch",
                 "--name", "echo", "--session", str(session), *extra, "--", sys.executable, "-c",
                 script, "-H", f"Authorization: Bearer {HF}", "https://user:pw@host/x",
                 f"HF_TOKEN={HF}"])


def test_a_launched_command_is_recorded_and_shown_masked_and_runs_with_the_real_argv(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = tmp_path / "s.jsonl"
    assert _launch(tmp_path, session) == 0
    out = capsys.readouterr().out
    assert HF not in out and "pw@" not in out
    assert "Bearer *** https://***@host/x HF_TOKEN=***" in out  # the job's echo, masked
    text = session.read_text()
    assert HF not in text and ":pw@" not in text
    # the box keeps the real argv (the run needs it) in a file only its owner reads
    (argv_json,) = (tmp_path / "box").rglob("argv.json")
    assert stat.S_IMODE(argv_json.stat().st_mode) == 0o600
    assert stat.S_IMODE(argv_json.parent.stat().st_mode) == 0o700
    assert f"HF_TOKEN={HF}" in json.loads(argv_json.read_text())
    assert main(["replay", str(session), "--print"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.endswith("secret(s) masked") and ", 6 secret(s)" in header, header


def test_no_redact_keeps_the_secrets_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = tmp_path / "s.jsonl"
    assert _launch(tmp_path, session, "--no-redact") == 0
    assert f"Bearer {HF}" in capsys.readouterr().out
    assert f"HF_TOKEN={HF}" in session.read_text()
    assert main(["replay", str(session), "--print"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("secrets kept (--no-redact)")


def test_a_block_masks_exactly_the_lines_that_hold_secrets() -> None:
    texts = [f"step {i}" for i in range(300)]
    texts[0] = f"token {HF}"
    texts[150] = "push to https://me:pw@host/x.git"
    texts[299] = f"Authorization: bearer {HF}"
    texts[200] = f"xhf_{HF[3:]} is not a token (no word boundary)"
    r = Redactor()
    out = r.lines(texts)
    assert out is not None
    assert out[0] == "token hf_***" and out[150] == "push to https://***@host/x.git"
    assert out[299] == "Authorization: bearer ***"
    assert [i for i, (a, b) in enumerate(zip(texts, out, strict=True)) if a != b] == [0, 150, 299]
    assert r.counts == {"hf_token": 1, "url_userinfo": 1, "bearer": 1}
    assert Redactor().lines(texts[1:150]) is None
