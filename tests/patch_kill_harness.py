"""What the patcher's kill tests share (test_patch_trust.py for apply, test_patch_rollback_journal.py
for rollback): the box-side helper SIGKILLed after a given step, a patcher on the local transport
that records its events, and a box reached over the real sshd whose python pauses between the
helper's steps, so a test can kill the helper or the console between two files.

test_patch_crash.py kills it at random steps in a loop of apply and rollback.
Kept in one place so every test kills the same way: a change to how the helper reports its steps
or how the console is started is made once, not in one copy of two.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote.errors import EXIT_OK
from remote.link.hosts import default_local
from remote.link.transport import LocalTransport
from remote.patcher.runner import HELPER, Patcher
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests.patchbox import GENERATOR, WORKER, make_site_packages, sha256
from tests.sshd_harness import Sshd

REPO = Path(__file__).resolve().parents[1]
JOURNAL = ".eagle3-patch-journal"


def spawn_helper(request: dict[str, Any], delay: float) -> subprocess.Popen[bytes]:
    """The box-side helper on `request`, pausing `delay` seconds after each step it announces
    (on stderr, `step NAME`)."""
    env = dict(os.environ, EAGLE3_PATCH_STEP_DELAY=str(delay))
    proc = subprocess.Popen([sys.executable, str(HELPER)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(request).encode())
    proc.stdin.close()
    return proc


def kill_at_step(request: dict[str, Any], step: int, rng: random.Random | None = None
                 ) -> tuple[int, list[str]]:
    """Start the helper and SIGKILL it while it rests after its `step`-th step (0: during
    start-up, at once or, given `rng`, at a moment it picks within 50 ms). Returns
    (returncode, steps it announced): a helper that finished before its `step`-th step exits
    on its own."""
    proc = spawn_helper(request, 0.05)
    assert proc.stderr is not None and proc.stdout is not None
    seen: list[str] = []
    if step == 0 and rng is not None:
        try:
            proc.wait(timeout=rng.uniform(0.0, 0.05))
        except subprocess.TimeoutExpired:
            pass
    else:
        while len(seen) < step:
            line = proc.stderr.readline().decode()
            if not line:
                break
            if line.startswith("step "):
                seen.append(line.split()[1])
    try:
        os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)
    proc.stdout.close()
    proc.stderr.close()
    return proc.returncode, seen


def kill_after(request: dict[str, Any], step: int) -> list[str]:
    """Run the helper with a pause after each step, SIGKILL it after its `step`-th."""
    return kill_at_step(request, step)[1]


def local_patcher(sp: Path, host_dir: Path) -> tuple[Patcher, list[Event]]:
    """A patcher of `sp` on the local transport, with the events it emits."""
    bus = EventBus()
    events: list[Event] = []
    bus.add_callback(events.append)
    return Patcher(LocalTransport(), default_local(str(host_dir)), bus,
                   site_packages=str(sp)), events


def leftovers(folder: Path) -> list[str]:
    """What the patcher left beside the pair: journal, backups, kept edits, temporary files."""
    return sorted(p.name for p in folder.iterdir() if "eagle3-" in p.name)


def assert_restored(originals: dict[Path, str], context: object = None) -> None:
    """Every file of the pair back to its original bytes (`originals`: path -> sha256), and
    nothing of the patcher's left beside them (journal, backups, temporary files)."""
    for path, digest in originals.items():
        assert sha256(path) == digest, (path, context)
    assert not leftovers(next(iter(originals)).parent), context


def assert_completed(events: list[Event], op: str, want: dict[Path, str], context: object = None
                     ) -> None:
    """The command after a kill finished the interrupted `op` (apply, rollback): each file holds
    its text in `want`, and the patcher said so."""
    assert {p: p.read_text() for p in want} == want, context
    assert any(f"completed an interrupted {op}" in str(e.payload.get("message")) for e in events), context


def assert_sweep_landed(split_seen: int, at_least: int, steps_seen: set[str], steps: set[str]
                        ) -> None:
    """The kill sweep did what it is for: kills between the two files of the pair, and at each
    of the helper's named steps."""
    assert split_seen >= at_least, "no kill landed between the two files"
    assert steps <= steps_seen, steps - steps_seen


def until(cond: Callable[[], object], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@dataclass
class SlowSshBox:
    """Host `box` over the real sshd; `console(...)` starts `python -m console ARGS --host box
    --site-packages SP` on it. Under `console(..., slow=True)` the box python pauses 0.3 s
    between the helper's steps, so the test can kill between two files; every other command
    runs the helper as production does (no pauses: they only cost time, ~3 s a command)."""

    sp: Path
    workdir: Path
    cwd: Path
    delay_file: Path

    @classmethod
    def make(cls, sshd: Sshd, tmp_path: Path, sp: Path) -> SlowSshBox:
        # The box python, pausing between the helper's steps as long as `delay_file` says (an
        # environment variable of the console would not cross sshd).
        delay_file = tmp_path / "step-delay"
        delay_file.write_text("")
        slow = tmp_path / "slowpy"
        slow.write_text(f'#!/bin/sh\nEAGLE3_PATCH_STEP_DELAY="$(cat {delay_file})" '
                        f'exec {sys.executable} "$@"\n')
        slow.chmod(0o755)
        workdir = tmp_path / "box-workdir"
        (tmp_path / "console.toml").write_text(
            "[hosts.box]\n"
            f'ssh = "{sshd.alias}"\n'
            f'python = "{slow}"\n'
            f'workdir = "{workdir}"\n'
            f'ssh_config = "{sshd.ssh_config}"\n'
            f'known_hosts = "{sshd.known_hosts}"\n')
        return cls(sp=sp, workdir=workdir, cwd=tmp_path, delay_file=delay_file)

    def console(self, *args: str, slow: bool = False) -> subprocess.Popen[str]:
        self.delay_file.write_text("0.3" if slow else "")
        common = ["--host", "box", "--site-packages", str(self.sp), "--no-record"]
        return subprocess.Popen([sys.executable, "-m", "console", *args, *common], cwd=self.cwd,
                                env={**os.environ, "PYTHONPATH": str(REPO)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    @staticmethod
    def finish(proc: subprocess.Popen[str]) -> str:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == EXIT_OK, out
        return out

    def helper_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-f", f"{self.workdir}/probes/patch_helper.py"],
                             capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]


def pair_box(sshd: Sshd, tmp_path: Path) -> tuple[SlowSshBox, Path, Path, dict[Path, str]]:
    """A slow SSH box over a site-packages holding the released speculators 0.3.0: the box, the
    two files a patch must never leave split (worker, generator) and their original sha256."""
    sp = make_site_packages(tmp_path)
    worker, gen = sp / WORKER, sp / GENERATOR
    return SlowSshBox.make(sshd, tmp_path, sp), worker, gen, {worker: sha256(worker), gen: sha256(gen)}
