"""A crashing stage's traceback stays whole in the job log and reaches the operator as one line
(remote/spine/traceback_fold.py, pipeline/tracebacks.py): `console run`, `console jobs tail` and the
recorded session (what the TUI and replays show) hold the folded line, never the frames.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from console.cli import main as console_main
from pipeline.tracebacks import format_for_log
from remote.spine import events as ev
from remote.spine.traceback_fold import MARK, TracebackFolder
from tests.pipeline.test_pipeline_config import _run_local
from tests.tiny_pipeline import pipeline_toml, tiny_dataset, tiny_model

FOLDED = re.compile(r"\[traceback folded: (\d+) lines, (\S+) raised( at (\S+):(\d+) in (\S+))?; "
                    r"full text in (\S+) from byte (\d+)\]")

# A real chained crash with a multi-line message (as transformers' protobuf ImportError has).
CRASH = (
    "import sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from pipeline.tracebacks import print_for_log\n"
    "def load():\n"
    "    raise ValueError('bad tokenizer.json')\n"
    "try:\n"
    "    try:\n"
    "        load()\n"
    "    except ValueError:\n"
    "        raise ImportError('\\n requires the protobuf library\\nsee the docs')\n"
    "except ImportError as exc:\n"
    "    print('before', flush=True)\n"
    "    print_for_log(exc, sys.stdout)\n"
    "print('@@eagle3 {\"type\":\"error\",\"stage\":\"x\",\"message\":\"m\"}', flush=True)\n"
    "print('after', flush=True)\n"
)
ROOT = str(Path(__file__).resolve().parents[3])


def _lines(text: str) -> tuple[list[str], list[int]]:
    texts = text.split("\n")[:-1]
    ends, pos = [], 0
    for t in texts:
        pos += len(t.encode()) + 1
        ends.append(pos)
    return texts, ends


def _crash_log() -> str:
    return subprocess.run([sys.executable, "-c", CRASH, ROOT], capture_output=True, text=True,
                          check=True).stdout


def test_a_chained_multiline_traceback_folds_to_one_line_pointing_at_its_bytes() -> None:
    log = _crash_log()
    assert log.count(MARK) == 2 and "    see the docs" in log  # the log keeps it all
    texts, ends = _lines(log)
    folder = TracebackFolder("/box/runs/r1/log")
    shown, shown_ends = folder.feed(texts, ends)
    rest = folder.flush()
    assert rest == ([], [])
    assert shown[0] == "before" and shown[-2].startswith("@@eagle3 ") and shown[-1] == "after"
    folded = [t for t in shown if "traceback folded" in t]
    assert len(folded) == 1 and len(shown) == 4
    m = FOLDED.search(folded[0])
    assert m is not None, folded[0]
    n_lines, exc, _, path, _, fn, log_path, start = m.groups()
    assert exc == "ImportError" and fn == "<module>" and path == "<string>"
    assert log_path == "/box/runs/r1/log"
    raw = log.encode()
    assert raw[int(start):].startswith(MARK.encode())
    # the folded block is exactly the traceback: from its first line to the record
    block = raw[int(start):raw.index(b"@@eagle3")].decode().rstrip("\n").split("\n")
    assert int(n_lines) == len(block)
    # offsets stay the log's: the folded line ends where its last line ended
    assert shown_ends[shown.index(folded[0])] == ends[texts.index(block[-1])]
    # nothing of the traceback is left over, and the message is not repeated
    assert not any("File \"" in t or "protobuf" in t for t in shown)


def test_a_block_split_across_reads_and_a_prefixed_engine_traceback() -> None:
    """Lines arrive in arbitrary pieces; vLLM prefixes every line of a worker's traceback."""
    pre = "(EngineCore pid=7) ERROR 12-03 04:05:06 [core.py:1] "
    log = (f"{pre}EngineCore failed\n{pre}{MARK}\n"
           f'{pre}  File "/x/vllm/v1/engine/core.py", line 42, in run_busy_loop\n'
           f"{pre}    self._process()\n{pre}RuntimeError: shm broken\n"
           f"(APIServer pid=1) INFO shutting down\n")
    texts, ends = _lines(log)
    folder = TracebackFolder("L")
    out: list[str] = []
    for i in range(len(texts)):  # one line per read
        got, _ = folder.feed(texts[i:i + 1], ends[i:i + 1])
        out += got
    assert out[0] == f"{pre}EngineCore failed" and out[-1] == "(APIServer pid=1) INFO shutting down"
    assert len(out) == 3 and out[1].startswith(pre + "[traceback folded: 4 lines, RuntimeError")
    assert "v1/engine/core.py:42 in run_busy_loop" in out[1]
    # no stage error record follows: the message is the only place the error is said
    assert out[1].endswith(f"from byte {len(texts[0]) + 1}]: shm broken")


def test_a_tail_that_stops_mid_traceback_flushes_it_folded() -> None:
    texts, ends = _lines(f"{MARK}\n" + '  File "a.py", line 1, in f\n')
    folder = TracebackFolder("L", offset=100)
    assert folder.feed(texts, ends) == ([], [])
    assert folder.active
    shown, _ = folder.flush()
    assert len(shown) == 1 and "incomplete" in shown[0] and "from byte 100" in shown[0]


def test_the_log_format_indents_only_message_continuations() -> None:
    try:
        raise KeyError("k")
    except KeyError as exc:
        text = format_for_log(exc)
    assert text.startswith(MARK) and text.rstrip().endswith("KeyError: 'k'")
    assert format_for_log(ValueError("a\nb")) == "ValueError: a\n    b\n"


def test_a_crashing_stage_shows_one_folded_line_in_run_tail_and_session(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real stage crash: prepare on a target whose tokenizer.json is damaged raises inside
    transformers (a chained traceback). The console prints the error once and the traceback as
    one line; the job log on the box holds the full traceback where that line points."""
    model = tiny_model(tmp_path)
    (model / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast"}))
    (model / "tokenizer.json").write_text('{"version": "1.0", "truncated')
    tiny_dataset(tmp_path)
    cfg = pipeline_toml(tmp_path)
    rc, events = _run_local(tmp_path, cfg)
    assert rc == 1
    out = capsys.readouterr().out
    run_id = next(e.payload["run_id"] for e in events if e.kind == ev.JOB_STARTED)
    log = tmp_path / "box" / "runs" / run_id / "log"
    raw = log.read_bytes()
    assert MARK.encode() in raw and b'  File "' in raw  # the engineer's copy is whole

    def check(shown: str) -> None:
        assert MARK not in shown and '  File "' not in shown, shown
        folded = FOLDED.findall(shown)
        assert len(folded) == 1, shown
        assert folded[0][6] == str(log)
        assert raw[int(folded[0][7]):].startswith(MARK.encode())

    check(out)
    errors = [e.payload["message"] for e in events if e.kind == ev.CONSOLE_ERROR]
    assert errors[0].startswith("prepare: prepare failed: ")
    assert all("prepare failed:" not in e for e in errors[1:])
    # the error's text reaches the terminal once: in its error line, not again in raw lines
    first_words = errors[0].split("failed: ", 1)[1][:40]
    assert out.count(first_words) == 1, out
    # what the TUI and a replay show: the recorded job lines
    check("\n".join(e.payload["text"] for e in events if e.kind == ev.JOB_LINE))

    rc = console_main(["jobs", "tail", run_id, "--no-follow", "--from-start", "--host", "local",
                       "--config", str(tmp_path / "console.toml"), "--no-record"])
    assert rc == 0
    check(capsys.readouterr().out)


async def test_a_failed_servers_log_tail_folds_the_traceback_and_keeps_its_message(
        tmp_path: Path) -> None:
    """What `console serve start` shows when the engine dies: its log's end, the traceback as
    one line carrying the exception's message (no stage record says it elsewhere)."""
    from remote.link.hosts import default_local
    from remote.link.transport import LocalTransport
    from remote.serving.serve import ServeRunner
    from remote.spine.bus import EventBus

    t = LocalTransport()
    await t.connect()
    host = dataclasses.replace(default_local(), workdir=str(tmp_path / "box"),
                               python=sys.executable)
    runner = ServeRunner(t, host, EventBus())
    dying = ("import sys\nprint('INFO starting', flush=True)\n"
             "def parse(v):\n    raise ValueError(f'invalid dtype {v!r}\\nchoose one of auto')\n"
             "try:\n    parse('no-such-dtype')\nexcept ValueError as exc:\n"
             "    sys.path.insert(0, sys.argv[1])\n"
             "    from pipeline.tracebacks import print_for_log\n    print_for_log(exc, sys.stdout)\n"
             "sys.exit(1)\n")
    try:
        info = await runner.jobs.launch([sys.executable, "-c", dying, ROOT], name="serve-x")
        await runner.jobs.wait(info.run_id)
        tail = await runner.log_tail(info.run_id)
    finally:
        await runner.close()
        await t.close()
    assert tail[0] == "INFO starting" and len(tail) == 2, tail
    m = FOLDED.search(tail[1])
    assert m is not None and m.group(2) == "ValueError" and m.group(6) == "parse", tail
    assert tail[1].endswith("]: invalid dtype 'no-such-dtype' choose one of auto"), tail
