"""Results handed back by a box (issue 48 row 6): `vllm bench serve --save-result` files a
compromised or buggy box wrote. Each is one line (ResultFileError, exit 2) or a run whose text
is drawn safe and cut, never an internal error, a NaN speedup or an escape reaching the
terminal; on connect, one such file in `<workdir>/bench` is left out with one line and the good
ones are still read. The real file is tests/data's, written by vLLM 0.32's bench."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from remote.bench import results
from remote.errors import EXIT_USAGE, ResultFileError
from remote.link.hosts import parse_config
from remote.link.transport import LocalTransport
from remote.ops import bench as bench_ops
from remote.spine import events as ev
from remote.spine.bus import EventBus

REAL = json.loads((Path(__file__).parents[2] / "data" / "vllm032-bench-serve-result.json")
                  .read_text())


def _set(key: str, value: object) -> Callable[[dict[str, Any]], Any]:
    return lambda d: d.__setitem__(key, value)


def _deep(d: dict[str, Any]) -> str:
    return json.dumps(d)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"


# (what the box wrote, a fragment of the one line it is refused with)
REFUSED: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("completed inf", _set("completed", float("inf")), "'completed' is 'inf', not a count"),
    ("completed nan", _set("completed", float("nan")), "'completed' is 'nan', not a count"),
    ("failed x", _set("failed", "x"), "'failed' is 'x', not a count"),
    ("failed list", _set("failed", [1]), "'failed' is '[1]', not a count"),
    ("drafts inf", _set("spec_decode_num_drafts", float("inf")),
     "'spec_decode_num_drafts' is 'inf'"),
    ("concurrency true", _set("max_concurrency", True), "has no concurrency to compare at"),
    ("throughput nan", _set("output_throughput", float("nan")),
     "without a number for 'output_throughput'"),
    ("per position x", _set("spec_decode_per_position_acceptance_rates", ["x"]),
     "per-position acceptance rates are not"),
]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name,spoil,why", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_hostile_result_is_one_line(tmp_path: Path, name: str,
                                      spoil: Callable[[dict[str, Any]], Any], why: str) -> None:
    doc = dict(REAL)
    spoil(doc)
    path = _write(tmp_path, "r.json", json.dumps(doc))  # Python writes NaN and Infinity
    with pytest.raises(ResultFileError) as caught:
        results.load_result(path)
    assert why in str(caught.value) and "\n" not in str(caught.value)


def test_deep_nesting_and_huge_numbers_are_not_json_or_left_out(tmp_path: Path) -> None:
    with pytest.raises(ResultFileError, match="not JSON"):
        results.load_result(_write(tmp_path, "deep.json", _deep(dict(REAL))))
    doc = dict(REAL)
    doc["max_tokens"] = "9" * 5000  # --metadata max_tokens=<5,000 digits>
    doc["spec_decode_acceptance_length"] = "long"
    run = results.load_result(_write(tmp_path, "big.json", json.dumps(doc))).run
    done = sum(p.requests - p.failed for p in run.points)
    assert run.max_tokens == round(sum(p.output_tokens for p in run.points) / done)
    assert run.points[0].acceptance is not None
    assert run.points[0].acceptance["mean_length"] is None


def test_text_from_the_box_is_drawn_safe_and_cut(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    base = dict(REAL)
    base.pop("spec_decode_num_drafts")
    base["label"] = "\x1b]0;owned\x07\x1b[2J" + "L" * (10 << 20)
    spec = dict(REAL)
    a = _write(tmp_path, "a.json", json.dumps(base))
    b = _write(tmp_path, "b.json", json.dumps(spec))
    run = results.load_result(a).run
    assert run.label.startswith("␛]0;owned␇␛[2J") and len(run.label) < 300
    assert run.label.endswith(f"... ({len(base['label'])} characters)")
    rc = main(["bench", "compare", str(a), str(b)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert len(out) < 100_000 and "nan" not in out.lower()


def test_compare_refuses_a_hostile_file_in_one_line(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    doc = dict(REAL)
    doc["output_throughput"] = float("nan")
    a = _write(tmp_path, "a.json", json.dumps(doc))
    b = _write(tmp_path, "b.json", json.dumps(REAL))
    rc = main(["bench", "compare", str(a), str(b)])
    _, err = capsys.readouterr()
    assert rc == EXIT_USAGE and len(err.splitlines()) == 1 and "internal error" not in err
    assert "without a number for 'output_throughput'" in err


async def test_on_connect_a_hostile_file_is_left_out_and_the_good_ones_are_read(
        tmp_path: Path) -> None:
    bench = tmp_path / "box" / "bench"
    bench.mkdir(parents=True)
    toml = tmp_path / "console.toml"
    toml.write_text(f'[hosts.local]\nworkdir = "{tmp_path / "box"}"\n')
    host = parse_config(toml.read_text(), str(toml)).host("local")
    bad = dict(REAL)
    bad["completed"] = float("inf")
    good = dict(REAL)
    good["label"] = "newer good run"
    for i, (name, doc) in enumerate((("old.json", REAL), ("bad.json", bad), ("new.json", good))):
        (bench / name).write_text(json.dumps(doc))
        os.utime(bench / name, (1_000_000 + i, 1_000_000 + i))  # oldest first
    (bench / "deep.json").write_text(_deep(dict(REAL)))
    os.utime(bench / "deep.json", (1_000_000 + 1, 1_000_000 + 1))
    transport = LocalTransport("local")
    await transport.connect()
    seen: list[ev.Event] = []
    bus = EventBus()
    bus.add_callback(seen.append)
    try:
        read = await bench_ops.found_results(transport, host, bus)
    finally:
        await transport.close()
    assert read == [str(bench / "old.json"), str(bench / "new.json")]
    said = [str(e.payload.get("message")) for e in seen if e.kind == ev.CONSOLE_INFO]
    assert len([s for s in said if "left out" in s]) == 2
    assert any(s.endswith("'completed' is 'inf', not a count from 0 to 1000000000000000")
               for s in said)
    labels = {e.payload.get("label") for e in seen if e.kind == ev.BENCH_POINT}
    assert "newer good run" in labels


def _point_with(categories: object) -> results.BenchRun:
    acc = {"drafts": 4, "draft_tokens": 12, "accepted": 3, "rate": 0.25, "mean_length": 1.75,
           "per_position": [0.5, 0.25, 0.0]}
    point = results.Point(concurrency=1, requests=4, failed=0, output_tokens=64, duration=1.0,
                          output_tok_s=64.0, req_s=4.0, ttft_p50=0.1, ttft_p99=0.2,
                          tpot_p50=0.01, tpot_p99=0.02, acceptance=acc,
                          categories=categories)  # type: ignore[arg-type]
    return results.BenchRun(label="speculative", url="http://127.0.0.1:8000", model="m",
                            speculative=True, max_tokens=16, rounds=1, prompts="p.jsonl",
                            prompts_sha256="0" * 64, started="2026-12-07T00:00:00Z",
                            points=[point])


def test_a_point_with_prompt_categories_reads_and_a_bad_category_is_one_line() -> None:
    """Issue 49's per-category windows live in the point (driver.category_figures): a result
    of `bench run` with categories reads back (the check of issue 48 refused the whole field),
    and a category with a number that is not one is refused in one line."""
    acc = {"drafts": 2, "draft_tokens": 6, "accepted": 1, "rate": 1 / 6, "mean_length": 1.5,
           "per_position": [0.5, 0.0, 0.0]}
    good = {"chat": {"requests": 2, "failed": 0, "output_tokens": 32, "duration": 0.5,
                     "output_tok_s": 64.0, "tpot_p50": 0.01, "acceptance": acc}}
    run = results.checked_run(_point_with(good), "r.json")
    assert run.points[0].categories == good
    for bad in ({"chat": {**good["chat"], "output_tok_s": float("nan")}},
                {"chat": {**good["chat"], "acceptance": {**acc, "rate": "x"}}}, ["chat"]):
        with pytest.raises(ResultFileError) as caught:
            results.checked_run(_point_with(bad), "r.json")
        assert "r.json: the point at concurrency 1 has" in str(caught.value)
        assert "\n" not in str(caught.value)
