"""Where a screen switch's time goes, under the 8-GPU day load, in process.

The same app and load as benchmarks/tui_day_load.py (a 1x replay of a generated day slice with
a recorder), switching 2, 5, 6, 8 in turn. For each switch it counts what Textual did between
the key and the first paint of the new screen plus a settling window: screen layouts
(Screen._refresh_layout), widgets painted (render_lines calls, by class) and screen updates
sent (full-screen LayoutUpdate or partial ChopsUpdate, with their line counts), and the
time the cycle collector ran (gc). With --profile FILE it also writes a cProfile of the
switching phase (pstats format); --paused measures the switch alone (the replay paused: no
load); latency percentiles are over all switches.

    python benchmarks/tui_switch_profile.py [--switches 16] [--paused] [--profile /tmp/switch.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import statistics
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from _common import SCREEN_KEYS, shown_at, watch_paints

SETTLE_S = 0.3  # what follows the first paint (focus, late layouts) counts to the switch


class Counts:
    """Counters the patched Textual methods add to while `on` is set."""

    def __init__(self) -> None:
        self.on = False
        self.reset()

    def reset(self) -> None:
        self.layouts = 0
        self.painted: Counter[str] = Counter()
        self.updates: list[tuple[str, int]] = []
        self.phases: Counter[str] = Counter()  # seconds spent in each phase
        self.dirty: list[str] = []  # repaints asked (widget:cells) since the last update
        self.since: list[str] = []  # widgets painted since the last update was sent
        self.trace: list[str] = []  # per update: when, kind, lines, what was painted
        self.t0 = time.perf_counter()


def instrument(app: Any, counts: Counts) -> None:
    from textual.screen import Screen
    from textual.widget import Widget

    original_layout = Screen._refresh_layout

    def refresh_layout(self: Any, *args: Any, **kwargs: Any) -> None:
        if counts.on:
            counts.layouts += 1
        original_layout(self, *args, **kwargs)

    Screen._refresh_layout = refresh_layout  # type: ignore[method-assign]
    original_on_layout = Screen._on_layout

    async def on_layout(self: Any, message: Any) -> None:
        if counts.on:  # who asked for a layout
            counts.dirty.append(f"layout<-{type(message.widget).__name__}#{message.widget.id}")
        await original_on_layout(self, message)

    Screen._on_layout = on_layout  # type: ignore[method-assign]
    # every class that defines its own render_lines: count each widget painted once per call
    classes = {Widget} | {c for c in _subclasses(Widget) if "render_lines" in c.__dict__}
    painting: set[int] = set()  # widgets inside a render_lines call (a super() call is one paint)
    for cls in classes:
        original = cls.__dict__["render_lines"]

        def wrapped(self: Any, crop: Any, _original: Any = original) -> Any:
            if id(self) in painting:
                return _original(self, crop)
            painting.add(id(self))
            t0 = time.thread_time()
            try:
                if counts.on:
                    counts.painted[type(self).__name__] += 1
                    counts.since.append(type(self).__name__)
                return _original(self, crop)
            finally:
                painting.discard(id(self))
                if counts.on:
                    counts.phases["paint " + type(self).__name__] += time.thread_time() - t0

        cls.render_lines = wrapped  # type: ignore[method-assign]
    from textual._compositor import Compositor

    original_update = Compositor.update_widgets

    def update_widgets(self: Any, widgets: set[Any]) -> None:
        if counts.on:  # who asked for a repaint, and how much of the screen it covers
            for w in widgets:
                if w in self.visible_widgets:
                    area = sum(r.area for r in w._repaint_regions)
                    counts.dirty.append(f"{type(w).__name__}#{w.id}:{area}")
        original_update(self, widgets)

    Compositor.update_widgets = update_widgets  # type: ignore[method-assign]
    from textual.css.stylesheet import Stylesheet

    from console.tui.widgets.common import View

    # CPU time of the UI thread inside each phase, outermost call only (no profiler: its overhead distorts)
    for owner, name, label in ((Compositor, "render_update", "render"),
                               (Compositor, "reflow", "reflow"),
                               (Stylesheet, "update_nodes", "restyle"),
                               (View, "on_state_changed", "view update"),
                               (type(app), "_fold", "fold")):
        _time(owner, name, label, counts)
    started = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:  # wall time: no nesting, no thread
        if phase == "start":
            started[0] = time.perf_counter()
        elif counts.on:
            counts.phases[f"gc gen{info['generation']}"] += time.perf_counter() - started[0]

    gc.callbacks.append(collected)
    display = app._display

    def counted_display(screen: Any, renderable: Any) -> None:
        if renderable is not None and counts.on:
            lines = len(getattr(renderable, "strips", None) or getattr(renderable, "chops", []))
            counts.updates.append((type(renderable).__name__, lines))
            counts.trace.append(f"{(time.perf_counter() - counts.t0) * 1e3:6.0f} ms "
                                f"{type(renderable).__name__} {lines} lines: "
                                + " ".join(sorted(set(counts.since)))
                                + "\n            asked: " + " ".join(counts.dirty)
                                + "\n            from: " + " < ".join(
                                    f"{f.name}" for f in traceback.extract_stack()[-9:-2][::-1]))
            counts.since = []
            counts.dirty = []
        display(screen, renderable)

    app._display = counted_display


def _time(owner: type, name: str, label: str, counts: Counts) -> None:
    original = getattr(owner, name)
    inside = [0]

    def timed(*args: Any, **kwargs: Any) -> Any:
        if not counts.on or inside[0]:
            return original(*args, **kwargs)
        inside[0] += 1
        t0 = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            inside[0] -= 1
            counts.phases[label] += time.thread_time() - t0

    setattr(owner, name, timed)


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out.add(sub)
        out |= _subclasses(sub)
    return out


async def run(session: Path, tmp: Path, switches: int, profile: Path | None, trace: bool,
              paused: bool) -> None:
    from tui_day_load import make_app, pct

    app = make_app(session, tmp / "rec.jsonl.zst", paused=paused)  # imports every widget class
    counts = Counts()
    instrument(app, counts)
    paints = watch_paints(app)
    per_key: dict[str, list[tuple[float, int, Counter[str], list[tuple[str, int]]]]] = {}
    phases: dict[str, Counter[str]] = {}
    profiler = cProfile.Profile() if profile else None
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause(1)
        while app.checkpoints is not None and not app.checkpoints.complete:
            await asyncio.sleep(0.05)
        # every screen shown once, so each later switch is to a mounted view
        for key in ("5", "6", "8", "2"):
            await pilot.press(key)
            await asyncio.sleep(0.5)
        c0 = time.process_time()
        w0 = time.perf_counter()
        order = ["5", "6", "8", "2"]
        for k in range(switches):
            key = order[k % len(order)]
            counts.reset()
            counts.on = True
            if profiler:
                profiler.enable()
            t0 = time.perf_counter()
            cpu0 = time.thread_time()
            await pilot.press(key)
            shown = await shown_at(paints, SCREEN_KEYS[key], t0)
            await asyncio.sleep(SETTLE_S)
            counts.phases["all (UI thread)"] += time.thread_time() - cpu0
            if profiler:
                profiler.disable()
            counts.on = False
            if shown is not None:
                per_key.setdefault(key, []).append((shown - t0, counts.layouts, counts.painted,
                                                    counts.updates))
                phases.setdefault(key, Counter()).update(counts.phases)
                if trace and k >= switches - 4:
                    print(f"switch to {SCREEN_KEYS[key]}: {(shown - t0) * 1e3:.0f} ms")
                    for line in counts.trace:
                        print("   ", line)
            await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))
        cpu = (time.process_time() - c0) / (time.perf_counter() - w0)
        app.source.replayer.pause()
        await pilot.pause(0.3)
    if profiler and profile:
        profiler.dump_stats(str(profile))
    all_lat = [s[0] for v in per_key.values() for s in v]
    print(f"{'paused' if paused else 'under load'}, switching: {cpu * 100:.1f} % of a core; "
          f"latency p50 {statistics.median(all_lat) * 1e3:.0f} ms, p95 "
          f"{pct(all_lat, 0.95) * 1e3:.0f} ms, p99 {pct(all_lat, 0.99) * 1e3:.0f} ms, max "
          f"{max(all_lat) * 1e3:.0f} ms over {len(all_lat)}")
    for key, samples in sorted(per_key.items()):
        lat = [s[0] * 1e3 for s in samples]
        layouts = [s[1] for s in samples]
        painted: Counter[str] = Counter()
        for s in samples:
            painted.update(s[2])
        updates: Counter[str] = Counter()
        lines = 0
        for s in samples:
            for kind, n in s[3]:
                updates[kind] += 1
                lines += n
        n = len(samples)
        print(f"to {SCREEN_KEYS[key]:9s} ({n}): latency median {statistics.median(lat):.0f} ms; per "
              f"switch + {SETTLE_S:g} s: {sum(layouts) / n:.1f} layouts, "
              f"{sum(painted.values()) / n:.1f} widget paints, "
              + ", ".join(f"{c / n:.1f} {k}" for k, c in updates.items())
              + f", {lines / n:.0f} lines sent")
        print("    CPU ms per switch in: " + ", ".join(f"{label} {t * 1e3 / n:.1f}"
                                                  for label, t in phases[key].most_common()))
        print("    painted: " + ", ".join(f"{name} {c / n:.1f}" for name, c in painted.most_common()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--switches", type=int, default=16)
    ap.add_argument("--profile", type=Path)
    ap.add_argument("--trace", action="store_true", help="each update of the last 4 switches")
    ap.add_argument("--paused", action="store_true", help="the replay paused: the switch alone")
    args = ap.parse_args()
    from session_day import generate

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        session = tmp / "slice.jsonl"
        generate(session, 511 * (args.switches * 2 + 30))
        asyncio.run(run(session, tmp, args.switches, args.profile, args.trace, args.paused))


if __name__ == "__main__":
    main()
