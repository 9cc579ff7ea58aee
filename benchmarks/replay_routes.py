"""`benchmarks/replay_print.py --routes`: the C-speed routes tried for `console replay --print`
before the session format changed (a regex over a whole block, msgspec decoding a block into
structs, a projection of the block-record format), alternated with the per-line path on the same
segments held in memory.
"""

from __future__ import annotations

import json
import re
import time
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any

import _common  # noqa: F401 (the repository root on sys.path, before the project imports)
import msgspec

from console.sessions.reader import SessionReader

_TS = r'\{"ts":"[0-9]{4}-[0-9]{2}-[0-9]{2}T([0-9]{2}:[0-9]{2}:[0-9]{2})\.[0-9]{3}Z"'
_JOB_SHAPE = re.compile(
    "^" + _TS + r',"host":"([^"\\\x00-\x1f]+)","kind":"job\.line","payload":\{"run_id":"'
    r'([^"\\\x00-\x1f]{0,20})[^"\\\x00-\x1f]*","name":"[^"\\\x00-\x1f]*","text":"'
    r'(?!@@eagle3 )([^"\\\x00-\x1f]*)","offset":(?:0|[1-9][0-9]*)\}\}$|^(.*)$', re.M)
_OFFSET_TAIL = re.compile(r'","offset":(?:0|[1-9][0-9]*)\}\}$', re.M)


def route_regex_format(segs: list[tuple[int, int, bytes]]) -> None:
    """One findall over a block with the recorder's exact job-line shape (anything else lands
    in the last group, for a fallback to find), then one %-format of the whole block: the
    regex engine and the formatter do the per-line work in C. (re.sub with a template is
    worse on 3.11: the template is expanded by Python code per match.)"""
    for _first, _count, data in segs:
        found = _JOB_SHAPE.findall(data.decode("utf-8")[:-1])
        ("%s [%s] %s| %s%s\n" * len(found)) % tuple(chain.from_iterable(found))


def route_regex_tails(segs: list[tuple[int, int, bytes]]) -> None:
    """Only the offset tails of a block removed by one regex substitution with a literal
    (C-expanded) replacement: the cheapest regex pass a block printer would need."""
    for _first, _count, data in segs:
        _OFFSET_TAIL.subn("", data.decode("utf-8")[:-1])


def route_msgspec(segs: list[tuple[int, int, bytes]]) -> None:
    """A block decoded as one JSON array into structs holding only the printed fields
    (session_decode._LINES), then formatted by one join over a generator."""
    from console.sessions.decode import _LINES

    for _first, _count, data in segs:
        recs = _LINES.decode(b"[" + data[:-1].replace(b"\n", b",") + b"]")
        "\n".join(f"{r.ts[11:19]} [{r.host}] {(r.payload.run_id or '')[:20]}| {r.payload.text}"
                  for r in recs if r.kind == "job.line")


class _Batch(msgspec.Struct, gc=False):
    texts: list[str] = msgspec.field(default_factory=list)
    run_id: str = ""


class _BatchLine(msgspec.Struct, gc=False):
    ts: str
    kind: str
    payload: _Batch | None = None
    host: str = ""


_BATCH_LINES = msgspec.json.Decoder(list[_BatchLine])


def as_batch_records(segs: list[tuple[int, int, bytes]]) -> list[bytes]:
    """The same events with each log batch as ONE record holding its texts as a JSON array (a
    record-format change, NOT what the recorder writes): what --print would then decode."""
    out = []
    for _first, _count, data in segs:
        lines: list[bytes] = []
        batch: dict[str, Any] | None = None
        for raw in data.split(b"\n")[:-1]:
            ev = json.loads(raw)
            p = ev["payload"]
            if ev["kind"] == "job.line" and batch is not None and batch["ts"] == ev["ts"] \
                    and batch["payload"]["run_id"] == p["run_id"]:
                batch["payload"]["texts"].append(p["text"])
                continue
            if batch is not None:
                lines.append(json.dumps(batch, separators=(",", ":")).encode())
                batch = None
            if ev["kind"] == "job.line":
                batch = {"ts": ev["ts"], "host": ev["host"], "kind": "job.lines", "payload": {
                    "run_id": p["run_id"], "name": p["name"], "texts": [p["text"]],
                    "offset": p["offset"]}}
            else:
                lines.append(raw)
        if batch is not None:
            lines.append(json.dumps(batch, separators=(",", ":")).encode())
        out.append(b"[" + b",".join(lines) + b"]")
    return out


def route_batch_records(blobs: list[bytes]) -> None:
    """Printing the batch-record format: one msgspec decode per block, then per batch one
    join of its texts (no per-line Python object but the decoded text itself)."""
    for blob in blobs:
        print_batch_records(blob)


def print_batch_records(blob: bytes) -> bytes:
    parts = []
    for r in _BATCH_LINES.decode(blob):
        if r.kind == "job.lines" and r.payload is not None:
            head = f"{r.ts[11:19]} [{r.host}] {r.payload.run_id[:20]}| "
            parts.append(head + ("\n" + head).join(r.payload.texts))
    return ("\n".join(parts) + "\n").encode()


def route_current(segs: list[tuple[int, int, bytes]]) -> None:
    from console.sessions.human_log import human_text

    for first, count, data in segs:
        bad: list[tuple[int, str]] = []
        (human_text(data, first, count, bad) + "\n").encode("utf-8", "replace")


def routes(path: Path, n: int, rounds: int = 3) -> None:
    import gc

    with SessionReader(path) as r:
        segs = list(r.segment_data())
    blobs = as_batch_records(segs)
    from console.sessions.human_log import human_text

    # the projection prints what --print prints (stats samples of the day are quiet)
    assert print_batch_records(blobs[0]) == (human_text(segs[0][2], 0, segs[0][1], []) + "\n"
                                             ).encode()
    tried: dict[str, Any] = {
        "line-per-event file, --print path (human_text + encode)": partial(route_current, segs),
        "regex findall + one %-format (shape only)": partial(route_regex_format, segs),
        "regex sub of offset tails only": partial(route_regex_tails, segs),
        "msgspec block -> structs + one join": partial(route_msgspec, segs),
        "batch-record projection (what job.lines records became)":
            partial(route_batch_records, blobs),
    }
    spent = dict.fromkeys(tried, 0.0)
    gc.disable()
    for k in range(rounds):  # alternated: the machine is shared
        for name in (list(tried) if k % 2 == 0 else list(reversed(tried))):
            spent[name] += cpu(tried[name])
    gc.enable()
    base = next(iter(spent.values()))
    print(f"routes on the same in-memory segments ({rounds} alternating rounds; decode "
          "included, open excluded):")
    for name, used in spent.items():
        print(f"  {name:<68} {n * rounds / used / 1e6:5.2f} M events/CPU-s   "
              f"time x{used / base:.2f} of the first")


def cpu(fn: object, *args: object) -> float:
    t = time.process_time()
    fn(*args)  # type: ignore[operator]
    return time.process_time() - t
