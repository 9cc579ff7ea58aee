"""Where `console replay --print`'s CPU goes on a session shaped like a real run: ns per record
for each part of the record fast path (console/sessions/human_fast.py), beside the whole of
print_session measured in the same run.

The session is the recorded demo run repeated (benchmarks/real_session.py). Each round makes
one pass over every segment, timing each part of each segment with process_time around it;
a part's figure is its best round (the machine is shared: the best round is the one least
disturbed). The parts run as print_session runs them, one segment at a time:
- read: the segment's bytes from the reader (a slice of the mapped file),
- framing: the count of the separator that proves one record a line,
- decode: msgspec's decode_lines into the typed records (the records' deallocation
  included: they are dropped after the last part),
- timestamps: the check of every record's ts at once,
- loop: the per-record Python loop that picks each shown record's template and fields,
- format: one `%` of the joined templates, the encode and the check of the bytes,
- write: to /dev/null.

    python benchmarks/replay_print_parts.py [--records 500000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from pathlib import Path

from real_session import write_repeated

from console.commands.replay import print_session
from console.sessions import human_fast
from console.sessions.human_records import _all_ts_ok
from console.sessions.reader import SessionReader

PARTS = ("read", "framing", "decode", "timestamps", "loop", "format", "write")


def one_round(path: Path) -> dict[str, float]:
    spent = dict.fromkeys(PARTS, 0.0)
    clock = time.process_time
    gc.collect()
    gc.disable()
    try:
        with SessionReader(path) as r, open(os.devnull, "wb") as out:
            segments = r.segment_data()
            while True:
                t0 = clock()
                got = next(segments, None)
                t1 = clock()
                spent["read"] += t1 - t0
                if got is None:
                    break
                first, count, data = got
                assert data.count(human_fast._SEP) == count - 1
                t2 = clock()
                recs = human_fast._RECORDS.decode_lines(data)
                t3 = clock()
                assert _all_ts_ok(recs)
                t4 = clock()
                bad: list[tuple[int, str]] = []
                pieces = human_fast.templates(recs, data, first, bad)
                t5 = clock()
                text = human_fast.joined(*pieces)
                t6 = clock()
                out.write(text)
                t7 = clock()
                del recs, pieces
                t8 = clock()
                assert bad == []
                spent["framing"] += t2 - t1
                spent["decode"] += t3 - t2 + t8 - t7
                spent["timestamps"] += t4 - t3
                spent["loop"] += t5 - t4
                spent["format"] += t6 - t5
                spent["write"] += t7 - t6
    finally:
        gc.enable()
    return spent


def whole(path: Path) -> float:
    gc.collect()
    t = time.process_time()
    with SessionReader(path) as r, open(os.devnull, "wb") as out:
        assert print_session(r, out, as_json=False) == []
    return time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "real.jsonl"
        n = write_repeated(path, args.records)
        with SessionReader(path, write_index=True):
            pass
        rounds, totals = [], []
        for _ in range(args.rounds):
            rounds.append(one_round(path))
            totals.append(whole(path))
        best = {part: min(r[part] for r in rounds) for part in PARTS}
        print(f"a recorded demo run repeated to {n:,} records; load average "
              f"{os.getloadavg()[0]:.2f}; best of {args.rounds} rounds, ns per record:")
        for part in PARTS:
            print(f"  {part:<11} {best[part] / n * 1e9:6.0f}")
        parts = sum(best.values())
        print(f"  {'sum':<11} {parts / n * 1e9:6.0f}   print_session whole: "
              f"{min(totals) / n * 1e9:.0f} ns ({n / min(totals) / 1e6:.2f} M records/CPU-s)")


if __name__ == "__main__":
    main()
