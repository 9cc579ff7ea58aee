"""The start every benchmark shares. A benchmark runs as `python benchmarks/NAME.py` from any
directory and imports the project's packages (console, remote, tests) and its sibling
benchmarks; importing this first puts the repository root and benchmarks/ on sys.path, once
here instead of in a copy at the top of each script. The harness several benchmarks measure
with (a tmux terminal, paints of an app, children's CPU) is here for the same reason."""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

for _path in (str(ROOT / "benchmarks"), str(ROOT)):
    if _path not in sys.path:
        sys.path.insert(0, _path)


def int_options(description: str | None = None, /, **defaults: int) -> argparse.Namespace:
    """The command line of a benchmark whose options are all sizes (run_all.py's QUICK passes
    smaller ones): an integer option per keyword, with its default (`max_tokens=32` is
    `--max-tokens`, 32 unless given)."""
    ap = argparse.ArgumentParser(description=description)
    for name, default in defaults.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    return ap.parse_args()


# The screens the TUI switch benchmarks go round, by the key that shows each.
SCREEN_KEYS = {"2": "overview", "5": "pipeline", "6": "stats", "8": "replay"}


async def shown_at(paints: list[tuple[float, str]], screen: str, since: float,
                   timeout: float = 5.0) -> float | None:
    """When (perf_counter) the first paint of `screen` at or after `since` came, from the
    (when, screen shown) pairs an instrumented app appends to `paints`; None if none came
    within `timeout`: a switch's latency is that paint, not the key press's return."""
    import asyncio

    while True:
        shown = [t for t, name in paints if t >= since and name == screen]
        if shown:
            return shown[0]
        if time.perf_counter() - since > timeout:
            return None
        await asyncio.sleep(0.001)


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages: on shared cores they set the spread."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's reaped children so far: differences of
    it are what a child used, which on a loaded machine holds still where wall time does not."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def pipeline(python: str, *args: str, env: dict[str, str] | None = None) -> None:
    """`python -m pipeline ARGS` in the repository; a failure ends the benchmark with the tail
    of its output."""
    proc = subprocess.run([python, "-m", "pipeline", *args], cwd=ROOT, capture_output=True,
                          text=True, env=env or {**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode:
        raise SystemExit(f"pipeline {' '.join(args)} exited {proc.returncode}:\n"
                         f"{(proc.stdout + proc.stderr)[-3000:]}")


def shell(cmd: str, env: dict[str, str] | None = None) -> tuple[float, float, int, str]:
    """A bash pipeline (pipefail) run in the repository with the project importable: its wall
    seconds, its children's CPU seconds, exit status and stderr."""
    env = env or {**os.environ, "PYTHONPATH": str(ROOT)}
    cpu, t = children_cpu(), time.perf_counter()
    res = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True,
                         cwd=ROOT, env=env)
    return time.perf_counter() - t, children_cpu() - cpu, res.returncode, res.stderr


def watch_paints(app: Any) -> list[tuple[float, str]]:
    """(when, screen shown) for each compositor update of `app` with something to draw, from
    its first one on: a paint is when an operator sees a change, not when a key returns."""
    paints: list[tuple[float, str]] = []
    original = app._display

    def display(screen: Any, renderable: Any) -> None:
        if renderable is not None:
            paints.append((time.perf_counter(), getattr(app, "active_screen_name", "")))
        original(screen, renderable)

    app._display = display
    return paints


class Tmux:
    """`argv` exec'd in the pane of a tmux server of its own (so the pane's pid is the
    program's), read and driven through one control-mode client: a `tmux capture-pane`
    process every 2 ms would eat the cores the program is measured on, and a `tmux send-keys`
    process per key would add its own start-up."""

    def __init__(self, argv: list[str], size: tuple[int, int] = (140, 40)) -> None:
        import psutil

        self.sock = f"bench-{uuid.uuid4().hex[:8]}"
        cmd = "exec env -u COLUMNS -u LINES TERM=xterm-256color " + shlex.join(argv)
        subprocess.run(["tmux", "-L", self.sock, "new-session", "-d", "-x", str(size[0]),
                        "-y", str(size[1]), "-c", str(ROOT), cmd], check=True, timeout=20)
        pid = subprocess.run(["tmux", "-L", self.sock, "display", "-p", "#{pane_pid}"],
                             capture_output=True, text=True, check=True).stdout.strip()
        self.proc = psutil.Process(int(pid))
        # One control-mode client answers every capture; its copy of the pane's output is off.
        self.ctl = subprocess.Popen(["tmux", "-L", self.sock, "-C", "attach"], text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        # The attach answers with a block of its own first; left unread, every later command
        # would be handed the block of the one before it (a capture one poll old).
        assert self.ctl.stdout is not None
        for line in self.ctl.stdout:
            if line.startswith(("%end", "%error")):
                break
        else:
            raise RuntimeError("the tmux control client ended before attaching")
        self._command("refresh-client -f no-output")

    def _command(self, command: str) -> list[str]:
        """Run one tmux command through the control client; its output lines."""
        assert self.ctl.stdin is not None and self.ctl.stdout is not None
        self.ctl.stdin.write(command + "\n")
        self.ctl.stdin.flush()
        out: list[str] = []
        inside = False
        for line in self.ctl.stdout:
            if line.startswith("%begin"):
                inside, out = True, []
            elif line.startswith(("%end", "%error")) and inside:
                if line.startswith("%error"):
                    raise RuntimeError(f"tmux {command!r}: {out}")
                return out
            elif inside:
                out.append(line)
        raise RuntimeError("the tmux control client ended")

    def screen(self) -> str:
        return "".join(self._command("capture-pane -p"))

    def wait_for(self, text: str, timeout: float = 30, count: int = 1) -> float:
        """Seconds until `text` shows `count` times on the screen."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if self.screen().count(text) >= count:
                return time.perf_counter() - t0
            time.sleep(0.002)
        raise RuntimeError(f"{text!r} x{count} not on screen in {timeout:g} s:\n{self.screen()}")

    def cpu(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system

    def open_echo(self) -> None:
        self.echo_pane = self._command("new-window -d -P -F '#{pane_id}' cat")[0].strip()

    def send_echo(self, word: str) -> None:
        """`word` and Enter to `cat`: `echoed` is true once it shows twice on its pane (the
        terminal's echo, then cat's copy), a key in and text out through the same pty path a
        switch takes, with nothing to paint."""
        self._command(f"send-keys -t {self.echo_pane} {word} Enter")

    def echoed(self, word: str) -> bool:
        return "".join(self._command(f"capture-pane -p -t {self.echo_pane}")).count(word) >= 2

    def keys(self, key: str) -> None:
        # Through the attached control client, as a terminal hands tmux a key: a `tmux
        # send-keys` process per key took 2-9 ms (fork, exec, connect) before tmux even had
        # the key, all of it counted in the switch; the control client's round trip is <0.1 ms.
        self._command(f"send-keys {shlex.quote(key)}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=20)
        self.ctl.wait(timeout=10)
