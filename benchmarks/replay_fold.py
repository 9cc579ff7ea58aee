"""The TUI replay's background checkpoint fold (console/tui/checkpoints.py) per event, before
and after log blocks became job.lines records folded a block at a time.

Writes the same day as benchmarks/replay_print.py (500 log lines a second in blocks of
`--batch` lines, ten 8-GPU samples a second; N events counted as log lines plus samples) in
both record formats, then measures in the same run, CPU time, best of `--rounds`:
- before: the fold as it was, on the line-per-event file: every event decoded and applied
  one by one (ConsoleState.apply_all over SessionReader.events), copying the state every 512
  events as StateCheckpoints does;
- now, old file: StateCheckpoints.build on the line-per-event file (a session recorded
  before job.lines records: one record is one event);
- now, blocks: StateCheckpoints.build on the job.lines file (a block decoded once and folded
  by ConsoleState.apply_batch).
Each fold's final state is checked equal to the others'. The issue's figure: ~15 us per event,
220-250 CPU-s for a 15 M-event day.

    python benchmarks/replay_fold.py [--events N] [--batch LINES] [--rounds R]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from _common import int_options  # first: the repository on sys.path
from replay_print import write_day

from console.sessions.reader import SessionReader
from console.tui.checkpoints import StateCheckpoints
from console.tui.model import ConsoleState
from remote.spine.events import utc_now


def fold_before(path: Path) -> ConsoleState:
    """The build loop before block records: events one at a time, a copy every 512."""
    cp = StateCheckpoints(path, ["box"])
    state = ConsoleState(["box"])
    cp._markers = state.markers
    with SessionReader(path) as reader:
        n = len(reader)
        for start in range(0, n, cp.every):
            state.apply_all(reader.events(start, min(start + cp.every, n)))
            if start + cp.every < n:
                cp._copy(state)
    return state


def fold_now(path: Path) -> ConsoleState:
    cp = StateCheckpoints(path, ["box"])
    cp.build()
    assert cp._reader is not None  # build opens the seek reader
    state = cp.state_at(len(cp._reader))  # the last copy plus what follows it
    cp.close()
    return state


def view(state: ConsoleState) -> tuple[object, ...]:
    h = state.host("box")
    return (state.events_seen, state.last_ts,
            {r: (j.tail.total, j.tail.offset, j.tail.window(0, 10**6)) for r, j in h.jobs.items()},
            {i: list(g.util) for i, g in h.gpus.items()})


def main() -> None:
    args = int_options(events=200_000, batch=500, rounds=2)
    n = args.events
    with tempfile.TemporaryDirectory() as d:
        lines, blocks = Path(d) / "lines.jsonl", Path(d) / "blocks.jsonl"
        t0 = utc_now()
        write_day(lines, n, args.batch, blocks=False, t0=t0)
        write_day(blocks, n, args.batch, blocks=True, t0=t0)
        runs = {"before (per event, line file)": (fold_before, lines),
                "now, line-per-event file": (fold_now, lines),
                "now, job.lines file": (fold_now, blocks)}
        best = dict.fromkeys(runs, float("inf"))
        views = {}
        for k in range(args.rounds):  # alternated: the machine is shared
            for name in (list(runs) if k % 2 == 0 else list(reversed(runs))):
                fn, path = runs[name]
                t = time.process_time()
                state = fn(path)
                best[name] = min(best[name], time.process_time() - t)
                views[name] = view(state)
        assert len({repr(v) for v in views.values()}) == 1, "the folds disagree"
        assert views["now, job.lines file"][0] == n
    base = best["before (per event, line file)"]
    print(f"checkpoint fold of {n:,} events (log blocks of {args.batch} lines), best of "
          f"{args.rounds}, CPU:")
    for name, used in best.items():
        print(f"  {name:<32} {used:6.2f} CPU-s  {used / n * 1e6:5.2f} us/event   "
              f"x{base / used:4.1f} vs before   15 M events: {used / n * 15e6:5.0f} CPU-s")


if __name__ == "__main__":
    main()
