"""The test fleet: three real sshd boxes on 127.0.0.2-4 from scripts/box_fleet.py, one per
test session (starting one costs about a second; the tests share it and leave it as found).

Each box's python is a two-line wrapper around a real box environment with its own copy of
speculators 0.3.0 in front (tests/patchbox.py), so a patch applied on one box touches that box's
files only, never the shared cached environments. box1 and box2 run the vLLM 0.32 environment;
box3 the vLLM 0.16 one: the box that is deliberately different.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests import box_env
from tests.patchbox import make_site_packages

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "box_fleet.py"
STACKS = {1: "vllm032", 2: "vllm032", 3: "vllm016"}


@dataclass
class Fleet:
    root: Path
    config: Path
    boxes: list[dict[str, object]]

    def box_dir(self, name: str) -> Path:
        return self.root / name

    def site_packages(self, name: str) -> Path:
        return self.root / name / "site-packages"

    def sshd_pid(self, name: str) -> int:
        return int((self.root / name / "sshd.pid").read_text().split()[0])

    def stop_box(self, name: str) -> None:
        """The box gone from the network (restart with `start_box`): its sshd listener and every
        open session's sshd process SIGKILLed, so a link already open is cut too, not only new
        ones refused. The listener is stopped first: no connection slips in between listing its
        sessions and killing them. Each session here is one process, a child of the listener
        holding the connection's socket (root login skips privilege separation's second one).
        What runs inside a session is left to end by itself (its pipes are gone): killing the
        login shells too once left pyenv's rehash lock behind on this shared machine, and every
        ssh login after it waited 60 s. Detached jobs stay: a test that wants them gone kills
        them itself."""
        listener = self.sshd_pid(name)
        os.kill(listener, signal.SIGSTOP)
        try:
            sessions = _children(listener)
        finally:
            os.kill(listener, signal.SIGKILL)
        for pid in sessions:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def start_box(self, name: str) -> None:
        before = self._pid_text(name)
        subprocess.run(["/usr/sbin/sshd", "-f", str(self.root / name / "sshd_config"),
                        "-E", str(self.root / name / "sshd.log")], check=True)
        self._wait_pidfile(name, before)

    def _pid_text(self, name: str) -> str:
        try:
            return (self.root / name / "sshd.pid").read_text()
        except OSError:
            return ""

    def _wait_pidfile(self, name: str, before: str) -> None:
        """sshd's daemon child writes its pid file after the command returns: until it has, the
        file still names the listener stopped before (a zombie here, where nothing reaps it,
        so a signal to it raises nothing), and a stop_box right after would miss the new one."""
        deadline = time.monotonic() + 10
        while self._pid_text(name) in (before, "") and time.monotonic() < deadline:
            time.sleep(0.02)

    def start_box_apart(self, name: str, hidden: Path) -> None:
        """The box restarted with a disk of its own at `hidden`: its sshd (and so every command
        it runs) in a mount namespace of its own with an empty tmpfs over that path, as a box
        whose /data is its local disk sees another box's /data. Undo: stop_box + start_box."""
        self.stop_box(name)
        hidden.mkdir(parents=True, exist_ok=True)
        sshd = ["/usr/sbin/sshd", "-f", str(self.root / name / "sshd_config"), "-E",
                str(self.root / name / "sshd.log")]
        before = self._pid_text(name)
        subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        'mount -t tmpfs tmpfs "$0" && exec "$@"', str(hidden), *sshd],
                       check=True)
        self._wait_pidfile(name, before)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return kids


def _wrapper(path: Path, python: Path, site: Path) -> Path:
    # The caller's PYTHONPATH (the console's uploaded source) comes first, the box's site after.
    path.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}"; '
                    f'export PYTHONPATH\nexec {python} "$@"\n')
    path.chmod(0o755)
    return path


def start_fleet(root: Path) -> Fleet:
    root.mkdir(parents=True, exist_ok=True)
    wrappers: list[str] = []
    for i, stack in STACKS.items():
        box = root / f"box{i}"
        box.mkdir(exist_ok=True)
        site = make_site_packages(box, vllm=False)
        wrappers += ["--box-python", f"{i}={_wrapper(box / 'python', box_env.ensure(stack), site)}"]
    done = subprocess.run([sys.executable, str(SCRIPT), "up", str(len(STACKS)), "--dir",
                           str(root), *wrappers], capture_output=True, text=True,
                          env={**os.environ})
    if done.returncode != 0:
        raise RuntimeError(f"box_fleet.py up failed: {done.stderr[-2000:]}")
    boxes = json.loads((root / "fleet.json").read_text())["boxes"]
    return Fleet(root, root / "console.toml", boxes)


def stop_fleet(fleet: Fleet) -> None:
    subprocess.run([sys.executable, str(SCRIPT), "down", "--dir", str(fleet.root)],
                   capture_output=True, check=False)
