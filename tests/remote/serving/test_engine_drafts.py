"""`console serve start --draft D --k K` against the real vLLM 0.32 CPU engine of the session's
engine box (tests/engine_fixture.py), one engine at a time, each stopped before the next:

- none: the target alone on the speculative role's port, with no spec-decode counters;
- a head that does not fit is refused with exit 4 before any job is launched.

A head given as a directory at K=2 and ngram (K=3) are checked on the servers `console bench
matrix` starts for them (tests/e2e/test_bench_matrix_engine.py, while each server is up: its
served --speculative-config, its probe, `bench run`'s acceptance, `serve status`, /metrics),
so the suite starts no engine of its own for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote.spine import events as ev
from tests import heads
from tests.engine_fixture import EngineBox, events, metrics, served_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _serve(box: EngineBox, tmp_path: Path, name: str, *args: str) -> tuple[int, list[ev.Event]]:
    box.release()
    session = tmp_path / f"{name}.jsonl"
    rc = box.cli("serve", "start", "--demo", *args, session=session)
    return rc, events(session)


def test_none_is_the_target_alone_on_the_speculative_port(engine_box: EngineBox,
                                                          tmp_path: Path) -> None:
    try:
        rc, evs = _serve(engine_box, tmp_path, "none", "--draft", "none")
        assert rc == 0, [e.payload.get("message") for e in evs if e.kind == ev.CONSOLE_ERROR]
        (ready,) = [e.payload for e in evs if e.kind == ev.SERVE_READY]
        assert (ready["role"], ready["url"], ready["draft"]) == ("speculative", engine_box.url,
                                                                 "none")
        assert not [e for e in evs if e.kind == ev.PROBE_RESULT]  # nothing to check
        assert served_spec(engine_box) is None
        assert "vllm:spec_decode_num_drafts" not in metrics(engine_box.url)
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
