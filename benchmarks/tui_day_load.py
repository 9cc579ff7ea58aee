"""The TUI under an 8-GPU day's load, in a real terminal (tmux) and in process, same run.

The load is a replay at 1x of a generated slice of the day (benchmarks/session_scale.py): a
500 lines/s training log and one 8-GPU stats sample every 100 ms, with a Recorder writing every
event to a .jsonl.zst session as a live console does. Measured, in tmux (`python
benchmarks/tui_day_load.py --child FILE`: the real app on a real pty) and headless in process:
- CPU of the console process as a percentage of one core, idle on the Overview screen;
- the same while switching screen every second (2, 5, 6, 8 in turn), and the switch latency:
  in tmux from the key sent to capture-pane showing the new screen (keys and polls go through
  one tmux control-mode client: a `tmux capture-pane` process every 2 ms would eat the cores
  the app is measured on, and a `tmux send-keys` process per key would add its own start-up);
  in process from the key to the first compositor update that paints the new screen (an
  update of the old one, or of the top bar, does not count).
Measuring starts once the replay's seek checkpoints are built (a one-off fold of the file in a
thread when a replay opens; a live console has none).
The baseline beside it is the same app on the same session, paused (no events flowing): its
CPU, and in process its switch latency (in tmux a paused screen has no text of its own to wait
for, so only the CPU).
With each switch's key, `cat` in another window of the same tmux is sent a word: its echo is
the terminal path's own round trip (key in, text out, no paint), measured at the same moment as
the switch it is the floor of. Under a dd truncating and rewriting 2 GB on the same disk in a
loop, that floor alone reached p99 90 ms, max 226 ms on this VM (5 ms quiet), and the slow
switches came at the same moments as slow echoes.
Targets: <= 15 % of a core under load, switch p99 < 100 ms. A p99 is only a p99 over enough
switches: over 24 it is the maximum, set by any scheduler hiccup of a shared machine; use
--switches 120 or more (the paused baseline in tmux measures only CPU, over at most 24).

    python benchmarks/tui_day_load.py [--seconds 20] [--switches 24] [--no-tmux] [--no-in-process]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import SCREEN_KEYS, Tmux, load_average, shown_at, watch_paints

# Text only that screen shows (the stage table's columns are sized to their contents, so its
# header spacing is not a constant).
SCREENS = {"2": "GPUs (8)", "5": "metrics", "6": "GPU history", "8": "Markers"}


def make_app(session: Path, record_to: Path, paused: bool) -> Any:
    from console.sessions.recorder import Recorder
    from console.sessions.writer import SessionWriter
    from tests.tui_helpers import replay_app

    app = replay_app(session, speed=1.0, paused=paused, start_screen="overview")
    Recorder(SessionWriter(record_to, ["box"])).attach(app.source.bus)
    return app


def child(session: Path, record_to: Path, paused: bool) -> None:
    """The app in the terminal; `record_to`.ready appears once its seek checkpoints are built."""
    import threading

    app = make_app(session, record_to, paused)

    def ready() -> None:
        while app.checkpoints is None or not app.checkpoints.complete:
            time.sleep(0.05)
        Path(f"{record_to}.ready").touch()

    threading.Thread(target=ready, daemon=True).start()
    app.run()


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def in_tmux(session: Path, tmp: Path, paused: bool, seconds: float, switches: int,
            log: Path | None = None) -> tuple[float, float, list[float], list[float]]:
    rec = tmp / f"rec-{uuid.uuid4().hex[:6]}.jsonl.zst"
    t = Tmux([sys.executable, str(Path(__file__).resolve()), "--child", str(session), str(rec)]
             + (["--paused"] if paused else []))
    try:
        t.wait_for("2 Overview")
        ready = Path(f"{rec}.ready")
        deadline = time.perf_counter() + 120
        while not ready.exists():
            if time.perf_counter() > deadline:
                raise RuntimeError("the replay's checkpoints were never built")
            time.sleep(0.1)
        time.sleep(1)
        c0, w0 = t.cpu(), time.perf_counter()
        time.sleep(seconds)
        idle = (t.cpu() - c0) / (time.perf_counter() - w0)
        order = ["5", "6", "8", "2"]
        lat: list[float] = []
        echo: list[float] = []
        if not paused:
            t.open_echo()
        c0, w0 = t.cpu(), time.perf_counter()
        for k in range(switches):
            key = order[k % len(order)]
            t0 = time.perf_counter()
            t.keys(key)
            if not paused:  # paused, the screens have nothing of their own to show
                # The terminal's own floor, at the same moment: `cat` in another window of the
                # same tmux is sent a word with the key; the console's paint is not involved.
                word = f"w{k}x"
                t.send_echo(word)
                shown = echoed = None
                while shown is None or echoed is None:
                    if shown is None and SCREENS[key] in t.screen():
                        shown = time.perf_counter() - t0
                    if echoed is None and t.echoed(word):
                        echoed = time.perf_counter() - t0
                    if time.perf_counter() - t0 > 10:
                        raise RuntimeError(f"no switch to {key!r} or no echo within 10 s")
                    time.sleep(0.002)
                lat.append(shown)
                echo.append(echoed)
                if log is not None:
                    with log.open("a") as f:
                        f.write(f"{time.time():.3f} {key} {lat[-1] * 1e3:.1f} "
                                f"{os.getloadavg()[0]:.2f} echo {echo[-1] * 1e3:.1f}\n")
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))
        switching = (t.cpu() - c0) / (time.perf_counter() - w0)
        return idle, switching, lat, echo
    finally:
        t.close()


async def in_process(session: Path, tmp: Path, paused: bool, seconds: float, switches: int
                     ) -> tuple[float, float, list[float]]:
    app = make_app(session, tmp / f"rec-{uuid.uuid4().hex[:6]}.jsonl.zst", paused)
    paints = watch_paints(app)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause(1)
        while app.checkpoints is not None and not app.checkpoints.complete:
            await asyncio.sleep(0.05)
        await pilot.pause(1)
        c0, w0 = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        idle = (time.process_time() - c0) / (time.perf_counter() - w0)
        order = ["5", "6", "8", "2"]
        lat: list[float] = []
        c0, w0 = time.process_time(), time.perf_counter()
        for k in range(switches):
            key = order[k % len(order)]
            t0 = time.perf_counter()
            await pilot.press(key)
            shown = await shown_at(paints, SCREEN_KEYS[key], t0)
            if shown is not None:
                lat.append(shown - t0)
            await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))
        switching = (time.process_time() - c0) / (time.perf_counter() - w0)
        # Stop the feed before the app shuts down: the app's pump, woken by an event while
        # the screen is torn down, fails to find its TopBar (a teardown race in app.py).
        app.source.replayer.pause()
        await pilot.pause(0.3)
    return idle, switching, lat


def report(name: str, load: tuple[float, float, list[float]],
           base: tuple[float, float, list[float]]) -> None:
    idle, sw, lat = load
    b_idle, b_sw, b_lat = base
    # In tmux the paused screens have no text of their own to wait for: a CPU baseline only.
    b_switch = (f"paused baseline p50 {statistics.median(b_lat) * 1e3:.0f} ms, p99 "
                f"{pct(b_lat, 0.99) * 1e3:.0f} ms" if b_lat else "paused baseline: CPU only")
    print(f"{name}: CPU idle-on-overview {idle * 100:5.1f} % of a core (paused baseline "
          f"{b_idle * 100:4.1f} %), while switching {sw * 100:5.1f} % (baseline {b_sw * 100:4.1f} "
          f"%)   target <= 15 %: {'met' if max(idle, sw) <= 0.15 else 'MISSED'}")
    print(f"{name}: screen switch p50 {statistics.median(lat) * 1e3:.0f} ms, p95 "
          f"{pct(lat, 0.95) * 1e3:.0f} ms, p99 {pct(lat, 0.99) * 1e3:.0f} ms, max "
          f"{max(lat) * 1e3:.0f} ms over {len(lat)} ({b_switch})   target p99 < 100 ms: "
          f"{'met' if pct(lat, 0.99) < 0.1 else 'MISSED'}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--switches", type=int, default=24)
    ap.add_argument("--no-tmux", action="store_true")
    ap.add_argument("--no-in-process", action="store_true")
    ap.add_argument("--log", type=Path, help="append each tmux switch: time, key, ms, load, "
                    "the echo floor's ms")
    ap.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--paused", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.paused)
        return
    from session_day import generate

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        session = tmp / "slice.jsonl"
        seconds_needed = int(args.seconds + args.switches + 15) * 2
        generate(session, 511 * seconds_needed)
        print(f"machine load average (1, 5, 15 min): {load_average()}")
        print(f"load: replay at 1x of {511 * seconds_needed:,} events (500 log lines/s, 10 "
              f"8-GPU samples/s), recorder to .jsonl.zst")
        if not args.no_tmux:
            load = in_tmux(session, tmp, False, args.seconds, args.switches, args.log)
            base = in_tmux(session, tmp, True, args.seconds, min(args.switches, 24))
            report("tmux", load[:3], base[:3])
            echo = load[3]
            slow = [(s_, e_) for s_, e_ in zip(load[2], echo, strict=True) if s_ >= 0.1]
            print(f"tmux: the terminal's floor, a word echoed by `cat` in another window, sent "
                  f"with each switch's key: p50 {statistics.median(echo) * 1e3:.0f} ms, p95 "
                  f"{pct(echo, 0.95) * 1e3:.0f} ms, p99 {pct(echo, 0.99) * 1e3:.0f} ms, max "
                  f"{max(echo) * 1e3:.0f} ms over {len(echo)}; of the {len(slow)} switches of "
                  f"100 ms or more, {sum(e_ >= 0.05 for _, e_ in slow)} had an echo of 50 ms or "
                  "more")
        if not args.no_in_process:
            load = asyncio.run(in_process(session, tmp, False, args.seconds, args.switches))
            base = asyncio.run(in_process(session, tmp, True, args.seconds, args.switches))
            report("in process", load, base)
        print(f"machine load average (1, 5, 15 min): {load_average()}")


if __name__ == "__main__":
    main()
