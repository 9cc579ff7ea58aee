"""`console serve start --draft D --k K` against the real vLLM 0.32 CPU engine of the session's
engine box (tests/engine_fixture.py), one engine at a time, each stopped before the next:

- a head given as a directory (a copy of the demo's trained head, somewhere else on the box) at
  K=2: it drafts (vLLM's counters), two positions per draft, and beats an untrained head;
- ngram (vLLM's prompt lookup, which this CPU build serves: docs/design.md §2.9): the server
  answers with spec-decode counters, and the job ran with method ngram and our lookup sizes;
- none: the target alone on the speculative role's port, with no spec-decode counters;
- a head that does not fit is refused with exit 4 before any job is launched.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from pipeline.serve import NGRAM_LOOKUP
from remote.spine import events as ev
from tests import heads
from tests.engine_fixture import EngineBox, answers, events

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SERVED_MARGIN = 1.1  # as tests/remote/serving/test_engine_serve.py: untrained ~1.0


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        return str(resp.read().decode())


def _serve(box: EngineBox, tmp_path: Path, name: str, *args: str) -> tuple[int, list[ev.Event]]:
    box.release()
    session = tmp_path / f"{name}.jsonl"
    rc = box.cli("serve", "start", "--demo", *args, session=session)
    return rc, events(session)


def _served_spec(box: EngineBox) -> dict[str, object] | None:
    """The --speculative-config of the running speculative server, from `serve status`'s
    job (the box's own record of its argv, via the job's log)."""
    logs = sorted(box.workdir.glob("runs/*/log"), key=lambda p: p.stat().st_mtime)
    text = logs[-1].read_text()
    for line in text.splitlines():
        if line.startswith("@@eagle3 ") and '"stage":"serve"' in line.replace(" ", ""):
            argv = json.loads(line[len("@@eagle3 "):])["argv"]
            if "--speculative-config" not in argv:
                return None
            return dict(json.loads(argv[argv.index("--speculative-config") + 1]))
    raise AssertionError(f"no serve record in {logs[-1]}")


def test_a_head_given_as_a_directory_at_k2(engine_box: EngineBox, tmp_path: Path) -> None:
    head = tmp_path / "heads" / "demo-copy"
    shutil.copytree(engine_box.out / "train" / "checkpoint", head)
    try:
        rc, evs = _serve(engine_box, tmp_path, "dir", "--draft", str(head), "--k", "2")
        errors = [e.payload.get("message") for e in evs if e.kind == ev.CONSOLE_ERROR]
        assert rc == 0, errors
        (ready,) = [e.payload for e in evs if e.kind == ev.SERVE_READY]
        assert ready["draft"] == str(head) and ready["k"] == 2
        (checked,) = [e.payload for e in evs if e.kind == ev.PROBE_RESULT]
        assert checked["probe"] == "head" and checked["result"]["ok"], checked
        assert _served_spec(engine_box) == {"method": "eagle3", "model": str(head),
                                            "num_speculative_tokens": 2,
                                            "draft_tensor_parallel_size": 1}
        out = tmp_path / "dir.json"
        assert engine_box.cli("bench", "run", "--concurrency", "1", "--rounds", "4",
                              "--max-tokens", "24", "--stop-at-eos", "--warmup", "1",
                              "--prompts", str(engine_box.out / "prepare" / "eval.jsonl"),
                              "--out", str(out)) == 0
        (point,) = json.loads(out.read_text())["run"]["points"]
        acc = point["acceptance"]
        assert acc["drafts"] > 0 and len(acc["per_position"]) == 2, acc
        assert acc["draft_tokens"] == 2 * acc["drafts"], acc
        assert acc["mean_length"] > SERVED_MARGIN, acc
        status = tmp_path / "status.jsonl"
        assert engine_box.cli("serve", "status", session=status) == 0
        (found,) = [e.payload for e in events(status) if e.kind == ev.SERVE_READY]
        assert (found["draft"], found["k"]) == (str(head), 2)  # read back from served.json
    finally:
        engine_box.cli("serve", "stop")
    assert not answers(engine_box.url)


def test_ngram_is_served_by_the_cpu_build(engine_box: EngineBox, tmp_path: Path) -> None:
    try:
        rc, evs = _serve(engine_box, tmp_path, "ngram", "--draft", "ngram")
        errors = [e.payload.get("message") for e in evs if e.kind == ev.CONSOLE_ERROR]
        assert rc == 0, errors
        assert _served_spec(engine_box) == {"method": "ngram", "num_speculative_tokens": 3,
                                            **NGRAM_LOOKUP}
        (checked,) = [e.payload for e in evs if e.kind == ev.PROBE_RESULT]
        assert checked["result"]["method"] == "ngram" and checked["result"]["ok"], checked
        out = tmp_path / "ngram.json"
        assert engine_box.cli("bench", "run", "--concurrency", "1", "--rounds", "2",
                              "--max-tokens", "24", "--warmup", "1",
                              "--prompts", str(engine_box.out / "prepare" / "eval.jsonl"),
                              "--out", str(out)) == 0
        (point,) = json.loads(out.read_text())["run"]["points"]
        acc = point["acceptance"]  # vLLM's counters; a lookup drafts up to K tokens, fewer
        assert acc is not None and acc["drafts"] > 0, acc  # when its match is short
        assert acc["drafts"] <= acc["draft_tokens"] <= 3 * acc["drafts"], acc
        assert len(acc["per_position"]) == 3, acc
        assert "vllm:spec_decode_num_drafts" in _metrics(engine_box.url)
    finally:
        engine_box.cli("serve", "stop")


def test_none_is_the_target_alone_on_the_speculative_port(engine_box: EngineBox,
                                                          tmp_path: Path) -> None:
    try:
        rc, evs = _serve(engine_box, tmp_path, "none", "--draft", "none")
        assert rc == 0, [e.payload.get("message") for e in evs if e.kind == ev.CONSOLE_ERROR]
        (ready,) = [e.payload for e in evs if e.kind == ev.SERVE_READY]
        assert (ready["role"], ready["url"], ready["draft"]) == ("speculative", engine_box.url,
                                                                 "none")
        assert not [e for e in evs if e.kind == ev.PROBE_RESULT]  # nothing to check
        assert _served_spec(engine_box) is None
        assert "vllm:spec_decode_num_drafts" not in _metrics(engine_box.url)
    finally:
        engine_box.cli("serve", "stop")


def test_a_head_that_does_not_fit_starts_nothing(engine_box: EngineBox, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    engine_box.release()
    # The demo target: hidden 64, vocab 100; this head is right but for its width.
    bad = heads.head(tmp_path, "wide", hidden=128, vocab=100, draft_vocab=64)
    before = sorted(engine_box.workdir.glob("runs/*"))
    session = tmp_path / "refused.jsonl"
    capsys.readouterr()
    rc = engine_box.cli("serve", "start", "--demo", "--draft", str(bad), session=session)
    out = capsys.readouterr()
    err = [ln for ln in (out.out + out.err).splitlines() if "error: " in ln]
    assert rc == 4, err
    assert len(err) == 1 and "hidden size" in err[0] and "128" in err[0] and "is 64" in err[0]
    assert sorted(engine_box.workdir.glob("runs/*")) == before  # no serve job launched
    assert not [e for e in events(session) if e.kind == ev.SERVE_STARTING]
