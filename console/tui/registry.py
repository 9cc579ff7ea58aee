"""One registry of operator commands: key bindings, the command palette and the help screen are
all built from it, so a key can never do something the palette does not list (or vice versa).
No Textual here; app.py turns entries into Bindings and palette hits.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.tui import screens
from remote import probe_table


@dataclass(frozen=True, slots=True)
class Command:
    id: str  # stable binding id (users can remap keys by id)
    key: str  # Textual key name(s), comma-separated
    action: str  # Textual action string run on the app
    title: str  # shown in the footer, palette and help
    help: str  # one line for the palette and the help screen
    group: str  # which screen it belongs to (or "global")
    show: bool = True  # in the footer
    replay_only: bool = False
    live_only: bool = False


def _nav(screen: screens.Screen) -> Command:
    """Screen switching: listed in the palette and help, not in the footer (the tabs show it)."""
    return Command(f"screen.{screen.name}", screen.key, f"show({screen.name!r})", screen.short_title,
                   screen.help, "global", show=False, replay_only=screen.replay_only)


def _replay(name: str, key: str, action: str, title: str, help: str) -> Command:
    """The replay screen's controls: shown only while a session replays."""
    return Command(f"replay.{name}", key, action, title, help, "replay", replay_only=True)


# The screens' names in tab order (their rows: console/tui/screens.py).
SCREENS = screens.SCREENS

COMMANDS: tuple[Command, ...] = (
    # navigation: a command per screen of the screens' table
    *(_nav(screen) for screen in screens.TABLE),
    Command("help", "question_mark,f1", "help", "Help", "List every key", "global"),
    Command("palette", "ctrl+p", "command_palette", "Palette", "Search commands", "global", show=False),
    Command("quit", "q", "quit", "Quit", "Leave the console", "global"),
    # host actions
    Command("host.connect", "c", "connect", "Connect", "Connect to the selected host", "hosts", live_only=True),
    # the probes with a key on the Probes screen: their rows in remote/probe_table.py
    *(Command(f"probe.{p.name}", p.key, f"probe({p.name!r})", p.title, p.tui_help, "probes", live_only=True)
      for p in probe_table.TABLE if p.key),
    Command("patch.plan", "p", "patch_plan", "Plan", "Plan the worker patch (diff)", "patch", live_only=True),
    Command("patch.apply", "a", "patch_apply", "Apply", "Apply the planned patch (asks first)", "patch",
            live_only=True),
    Command("patch.verify", "v", "patch_verify", "Verify", "Check which recipes are in effect", "patch",
            live_only=True),
    Command("patch.rollback", "r", "patch_rollback", "Rollback", "Restore the original file (asks first)",
            "patch", live_only=True),
    Command("stage.start", "s", "stage_start", "Start", "Start the selected stage", "pipeline", live_only=True),
    Command("stage.resume", "u", "stage_resume", "Resume", "Resume the pipeline from where it stopped",
            "pipeline", live_only=True),
    Command("stage.cancel", "x", "stage_cancel", "Cancel", "Cancel the selected stage (asks first)",
            "pipeline", live_only=True),
    Command("serve.start", "g", "serve_start('speculative')", "Serve",
            "Start vLLM with the pipeline's trained head (console serve start)", "bench", live_only=True),
    Command("serve.baseline", "o", "serve_start('baseline')", "Baseline",
            "Start vLLM without speculation, at vllm_url's port + 1 (serve start --baseline)", "bench",
            live_only=True),
    Command("serve.stop", "z", "serve_stop", "Stop srv", "Stop the host's vLLM servers (asks first)", "bench",
            live_only=True),
    Command("bench.run", "b", "bench_run", "Bench", "Run a benchmark sweep (console bench run options)",
            "bench", live_only=True),
    Command("bench.matrix", "M", "bench_matrix", "Matrix",
            "Run a speculation matrix: drafts x K x temperature x concurrency, one engine at a time "
            "(console bench matrix options)", "bench", show=False, live_only=True),
    Command("log.follow", "f", "follow", "Follow", "Follow the end of the log (or pause it)", "pipeline"),
    Command("log.records", "l", "log_records", "Records", "Show or hide the stage's @@eagle3 records in the log",
            "pipeline"),
    Command("patch.wrap", "w", "diff_wrap", "Wrap", "Wrap long diff lines (or scroll them sideways)", "patch"),
    Command("notes", "n", "notes", "Notes", "The selected host's notifications and errors, newest last",
            "global"),
    # replay
    _replay("pause", "space", "replay_toggle", "Pause/Play", "Pause or resume the replay"),
    _replay("step", "full_stop", "replay_step", "Step", "Publish the next event (while paused)"),
    _replay("speed", "greater_than_sign", "replay_speed", "Speed", "Cycle speed 1x / 10x / max"),
    _replay("next_marker", "right_square_bracket", "replay_marker(1)", "Next marker",
            "Seek to the next stage/patch/bench marker"),
    _replay("prev_marker", "left_square_bracket", "replay_marker(-1)", "Prev marker",
            "Seek to the previous marker"),
    _replay("seek", "t", "replay_seek", "Seek time", "Seek to a time (HH:MM:SS or +seconds)"),
    _replay("start", "0", "replay_restart", "Restart", "Seek to the start of the session"),
)


def commands_for(mode: str) -> list[Command]:
    """The commands that make sense in this mode ("live" or "replay")."""
    return [c for c in COMMANDS if not (c.replay_only and mode != "replay") and not (c.live_only and mode != "live")]


def key_label(key: str) -> str:
    names = {"question_mark": "?", "full_stop": ".", "greater_than_sign": ">", "space": "space",
             "right_square_bracket": "]", "left_square_bracket": "[", "ctrl+p": "ctrl+p"}
    return "/".join(names.get(k, k) for k in key.split(","))
