"""`console replay` on sessions shaped like a real run (benchmarks/data/demo-run.jsonl, a
recorded `console run --demo`, repeated): the printed bytes are the ones printed before the
print path was made faster, and a cold open does work in proportion to the file.

The expected outputs were made by the print path of commit d207e29 (before issue 30): the
recording's `--print` is tests/data/demo-run.print.txt, and the digests below are of
`--print` and `--json` of the recording repeated to 20,000 records (benchmarks/
real_session.py, deterministic). A change to the printer's text is a change to these files,
made on purpose."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from console.sessions import index as session_index
from console.sessions import source as session_source
from console.sessions.reader import SessionReader
from remote.spine.events import SEEKABLE_KINDS

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))
from real_session import RECORDED, write_repeated  # noqa: E402

REPEATED = 20_000
DIGESTS = {
    "--print": "f33dd2df39a93ccb4f4fba28fbeba595d4ca6688508580ba285a52449268a081",
    "--json": "154583bfb9e93a86afbc8a24df99d72f2c05d850288da2c4ed60cbcbc606919a",
}


def _replay(path: Path, mode: str) -> bytes:
    res = subprocess.run([sys.executable, "-m", "console", "replay", str(path), mode],
                         capture_output=True, cwd=REPO, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stderr == b""
    return res.stdout


def test_the_recorded_run_prints_as_before() -> None:
    got = _replay(RECORDED, "--print")
    assert got.decode("utf-8") == (REPO / "tests" / "data" / "demo-run.print.txt").read_text()


@pytest.fixture(scope="module")
def repeated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("real") / "repeated.jsonl"
    assert write_repeated(path, REPEATED) == REPEATED
    return path


@pytest.mark.parametrize("mode", sorted(DIGESTS))
def test_a_repeated_real_run_prints_the_same_bytes_as_before(repeated: Path, mode: str) -> None:
    session_index.index_path(repeated).unlink(missing_ok=True)
    got = _replay(repeated, mode)
    assert hashlib.sha256(got).hexdigest() == DIGESTS[mode]


def test_a_cold_open_counts_each_byte_a_bounded_number_of_times(
        repeated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session without its index: the bytes handed to the line counter add up to about the
    file once, not once per marker (which made a cold open of a real run quadratic: 15 s at
    500k events), and the markers found are every event of a seekable kind."""
    from console.sessions import markers as session_markers

    seen = [0]
    real = session_source.count_events

    def counting(data: bytes) -> int:
        seen[0] += len(data)
        return real(data)

    monkeypatch.setattr(session_source, "count_events", counting)
    monkeypatch.setattr(session_markers, "count_events", counting)
    # several segments per open, so a marker far into a segment is counted
    monkeypatch.setattr(session_source, "PLAIN_SEGMENT", 256 << 10)
    session_index.index_path(repeated).unlink(missing_ok=True)
    with SessionReader(repeated, write_index=True) as r:
        markers = r.markers()
        kinds = [r.event(i).kind for i in range(len(r))]
    size = repeated.stat().st_size
    assert 0 < seen[0] <= 2 * size
    assert markers == [i for i, k in enumerate(kinds) if k in SEEKABLE_KINDS]
    assert len(markers) > REPEATED // 20  # a real run's stage events, not a vacuous check
    assert session_index.index_path(repeated).exists()
    with SessionReader(repeated) as again:
        assert again.index_reused and again.markers() == markers


def test_markers_with_blank_lines_between_events_are_counted_right(tmp_path: Path) -> None:
    """The counting without a split holds only without blank lines; with them each stretch
    between two markers is split and counted, and the positions are the same."""
    lines = RECORDED.read_bytes().split(b"\n")
    path = tmp_path / "blanks.jsonl"
    path.write_bytes(lines[0] + b"\n" + b"\n\n".join(lines[1:]))
    with SessionReader(RECORDED) as plain, SessionReader(path, write_index=True) as spaced:
        assert spaced.markers() == plain.markers() and plain.markers()
        assert len(spaced) == len(plain)


def _shapes() -> list[bytes]:
    """Records of the common kinds in every shape a field can take: the ones the segment
    printer formats and the ones it must leave to the per-event printer."""
    from remote.spine.events import Event, parse_ts

    when = parse_ts("2026-12-03T04:05:06.789Z")
    odd: list[object] = [None, True, 0, 0.0, 7, 2.5, 1234.5, -3, 1e300, "s", "", "x\x1b[2J",
                         [1], {"a": 1}]
    payloads: list[dict[str, object]] = [{}]
    for key in ("stage", "done", "total", "unit", "rate"):
        base = {"stage": "train", "done": 3, "total": 10, "unit": "steps", "rate": 1.5}
        payloads += [{**base, key: v} for v in odd]
        payloads.append({k: v for k, v in base.items() if k != key})
    for key in ("summary", "message", "label"):
        payloads += [{key: v} for v in odd]
        payloads += [{"summary": v, "message": "the message"} for v in odd]
    kinds = ["stage.progress", "console.info", "console.warning", "console.error", "marker",
             "stage.end", "job.exit", "probe.result", "stats.sample"]
    hosts = ["local", "", "b\u202eox"]
    return [Event(kind, hosts[n % 3], payload, when).to_json().encode()
            for kind in kinds for n, payload in enumerate(payloads)]


def test_typed_kinds_print_what_the_per_event_printer_prints() -> None:
    from tests.console.sessions.test_replay_fast import _typed, human_text

    lines = _shapes()
    # with a job.lines record in the segment (the batch path) and without (line by line)
    block = (b'{"ts":"2026-12-03T04:05:06.789Z","host":"box","kind":"job.lines","payload":'
             b'{"run_id":"r","name":"n","texts":["a","b"],"offsets":[0,1]}}')
    for segment in (lines, [block, *lines], [*lines[:40], block, *lines[40:]]):
        bad: list[tuple[int, str]] = []
        got = human_text(b"\n".join(segment) + b"\n", 0, len(segment), bad)
        want, want_bad = _typed(segment, 0)
        assert (got.split("\n") if got else []) == want
        assert [i for i, _ in bad] == want_bad


def test_a_printers_cold_open_leaves_the_markers_to_the_first_reader_that_seeks(
        repeated: Path) -> None:
    """`replay --print` writes the index without looking for markers; the first reader that
    asks for them finds them and writes the index again with them, so later opens reuse it."""
    idx = session_index.index_path(repeated)
    idx.unlink(missing_ok=True)
    with SessionReader(repeated, write_index=True, find_markers=False) as printer:
        assert printer._markers is None
    assert idx.exists()
    with SessionReader(repeated) as seeker:
        assert seeker.index_reused
        markers = seeker.markers()
        kinds = [seeker.event(i).kind for i in range(len(seeker))]
    assert markers == [i for i, k in enumerate(kinds) if k in SEEKABLE_KINDS] and markers
    with SessionReader(repeated) as later:
        assert later.index_reused and later._markers == markers  # from the index, not found


def test_replay_print_of_a_large_session_writes_its_index(tmp_path: Path) -> None:
    """The command itself, on a session over the size that gets an index: its one pass
    leaves the index beside the file (written to a temporary name, then renamed)."""
    path = tmp_path / "large.jsonl"
    write_repeated(path, 120_000)  # ~35 MB: over session_index.MIN_BYTES
    assert path.stat().st_size >= session_index.MIN_BYTES
    _replay(path, "--json")
    assert session_index.index_path(path).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["large.jsonl", "large.jsonl.idx"]
