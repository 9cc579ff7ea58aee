"""Python's cycle collector kept off the console's screen switches.

Measured under the 8-GPU day load (benchmarks/tui_switch_profile.py, in process): a full
(generation 2) collection of the console's heap took 70-95 ms, four times in 30 s, and landed
inside a switch often enough to set its p99 on its own (one paused switch: 123 ms, 63 of them
in the collector). Nearly all of what it scans is built once and lives as long as the app:
Textual's DOM, stylesheets and caches, the imported modules, a replay's seek checkpoints.

- `settle()`, once that is built, collects it one last time and moves the survivors to the
  permanent generation (`gc.freeze`): later full collections scan only what was made since
  (measured: 15-38 ms instead of 70-95). Reference counting still frees anything frozen that
  dies; only a cycle among frozen objects would outlive its use until `release()` (the app's
  unmount) hands them all back to the collector.
- `pause()`/`resume()` hold the automatic collector for the few tens of ms between a key and
  the new screen's paint, as Textual itself does during a smooth scroll
  (`App._realtime_animation_begin`); the collection it would have run happens right after the
  paint. A pause never outlives `SWITCH_HOLD_S` in app.py: the switch's release resumes it.
"""

from __future__ import annotations

import gc


class SwitchCollector:
    """Pauses of the collector, paired: a resume re-enables only what its own pause turned off
    (Textual may have the collector off for a scroll, or a caller for a whole replay)."""

    def __init__(self) -> None:
        self._paused = False
        self.frozen = False

    def pause(self) -> None:
        if not self._paused and gc.isenabled():
            gc.disable()
            self._paused = True

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            gc.enable()

    @property
    def paused(self) -> bool:
        return self._paused

    def settle(self) -> None:
        """Collect once more and freeze what survives (again after more start-up work: each
        freeze adds to the permanent generation, and a collection skips what is already in it)."""
        gc.collect()
        gc.freeze()
        self.frozen = True

    def release(self) -> None:
        """The app is ending: what it froze is collectable again (tests run many apps in one
        process; the cycles of an ended one must not stay frozen)."""
        self.resume()
        if self.frozen:
            self.frozen = False
            gc.unfreeze()
