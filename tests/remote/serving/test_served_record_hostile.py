"""served.json as a box may hand it back (issue 48 row 6): `serve status` crashed on
`"pid": 1e400`, showed NaN or negative seconds as a start time and printed a 10 MB model name
whole. Each field is now taken only of its type, text drawn safe and cut."""

from __future__ import annotations

import json
from pathlib import Path

from remote.jobs.records import RunInfo
from remote.link.transport import LocalTransport
from remote.serving.records import RECORD_NAME, Served, parse_record, read_record


def _info(tmp_path: Path) -> RunInfo:
    return RunInfo.from_dict({"run_id": "r1", "name": "serve-speculative", "argv": [],
                              "pid": 4242, "started": "", "state": "running",
                              "returncode": None, "ended": None,
                              "log_path": str(tmp_path / "log"), "log_size": 0})


def _record(**fields: object) -> str:
    base: dict[str, object] = {"role": "speculative", "url": "http://127.0.0.1:8000",
                               "run_id": "r1", "model": "m", "pid": 777, "seconds": 42.0}
    base.update(fields)
    return json.dumps(base)


def test_each_field_only_of_its_type(tmp_path: Path) -> None:
    info = _info(tmp_path)
    good = parse_record(_record(), info)
    assert good == Served("speculative", "http://127.0.0.1:8000", "r1", 42.0, "m", 777)
    for pid in (1e400, 1, -5, True, "7", 1 << 40):
        got = parse_record(_record(pid=pid), info)
        assert got is not None and got.pid == 4242, pid  # the job's own pid instead
    for seconds in (float("nan"), float("inf"), -3, "x", True):
        got = parse_record(_record(seconds=seconds), info)
        assert got is not None and got.seconds is None, seconds
        assert "answered after" not in got.line()
    huge = parse_record(_record(model="\x1b]0;x\x07" + "M" * (10 << 20)), info)
    assert huge is not None and len(huge.model) < 300 and "\x1b" not in huge.line()
    for bad in ("[]", "1", "{", "[" * 100_000, json.dumps({"role": 5, "url": "u"})):
        assert parse_record(bad, info) is None


async def test_serve_status_reads_a_hostile_record_without_a_traceback(tmp_path: Path) -> None:
    info = _info(tmp_path)
    (tmp_path / RECORD_NAME).write_text('{"role":"speculative","url":"http://h:1","pid":1e400,'
                                        '"seconds":NaN,"model":"' + "m" * (1 << 20) + '"}')
    t = LocalTransport()
    await t.connect()
    try:
        got = await read_record(t, info)
    finally:
        await t.close()
    # The record is cut at 64 KiB: not JSON any more, read as a job without one.
    assert got is None
    (tmp_path / RECORD_NAME).write_text('{"role":"speculative","url":"http://h:1","pid":1e400,'
                                        '"seconds":-1,"model":"m"}')
    await t.connect()
    try:
        got = await read_record(t, info)
    finally:
        await t.close()
    assert got == Served("speculative", "http://h:1", "r1", None, "m", 4242)
