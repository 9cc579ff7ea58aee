"""The demo pipeline trained once per test session, by the box runner, with the console gone.

Why one: the demo pipeline (demo-setup, prepare, extract, vocab, train, evaluate) costs ~2-3
minutes on the shared cores, and several places need a trained demo: tests/pipeline/test_pipeline_demo.py
and tests/pipeline/test_pipeline_box_runner.py assert on this very run, and the engine box
(tests/engine_fixture.py) serves its target and head. Training it twice bought nothing.

The run is the issue's own story (#28): `console run --host local --demo` in a process of its
own, SIGKILLed once the extract stage has started; the box runner (one detached job) carries
the pipeline through evaluate with no console running, which `Carried` records as observed
from the box's run directory. Then the next start: `console run --host local --demo` again, in
this process, recorded to `root/first.jsonl` (it finds every stage done). The consoles keep
their laptop state (remembered runs, cursors) under `root/state` (XDG_STATE_HOME).

The engine box reaches this demo through a symlink, not a copy: stage manifests key the
target and dataset by their resolved paths, so only the same files seen through a link keep
every stage complete. test_pipeline_demo.py reruns stages of it (evaluate, a killed extract,
vocab); each of those tests leaves it complete again, as its own assertions check.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from console.cli import main as console_main
from tests.sshd_harness import Sshd

REPO = Path(__file__).resolve().parents[1]
CARRY_TIMEOUT = 1200.0  # the whole demo pipeline with no console, on loaded shared cores


@dataclass
class Carried:
    """What the box did after its console was killed."""

    run_dir: Path
    log_at_kill: str  # the run's log when the console was killed
    log: str  # the run's whole log once it ended
    exit: dict[str, object]  # the run's exit.json
    console_rc: int  # the killed console's exit status (-9)
    consoles_seen: int  # processes naming this demo's console.toml seen while the box went on
    polls: int  # how often they were looked for


@dataclass
class Demo:
    root: Path
    box: Path
    console_toml: Path
    config: Path
    out: Path
    carried: Carried | None = None

    @property
    def demo_dir(self) -> Path:
        return self.config.parent

    @property
    def state(self) -> Path:
        """XDG_STATE_HOME of the demo's consoles (remembered runs, tail cursors)."""
        return self.root / "state"


def run_local(demo: Demo, session: Path, *extra: str) -> int:
    """`console run --host local ARGS`, recorded to `session`."""
    return console_main(["run", "--host", "local", "--config", str(demo.console_toml),
                         "--session", str(session), *extra])


def ssh_box(demo: Demo, sshd: Sshd, tmp_path: Path, workdir: Path) -> tuple[Path, Path]:
    """The demo as a box reached through the loopback sshd: its config with absolute paths
    (the TOML is uploaded elsewhere on the box) and a console.toml naming the host `box`."""
    text = demo.config.read_text()
    d = demo.config.parent
    for key, rel in (("output_dir", "out"), ("model", "target"),
                     ("dataset", "conversations.jsonl")):
        text = text.replace(f'{key} = "{rel}"', f'{key} = "{d / rel}"')
    cfg = tmp_path / "ssh-pipeline.toml"
    cfg.write_text(text)
    console_toml = tmp_path / "console.toml"
    console_toml.write_text(
        "[hosts.box]\n"
        f'ssh = "{sshd.alias}"\n'
        f'ssh_config = "{sshd.ssh_config}"\n'
        f'known_hosts = "{sshd.known_hosts}"\n'
        f'python = "{sys.executable}"\n'
        f'workdir = "{workdir}"\n')
    return cfg, console_toml


@contextmanager
def demo_state(demo: Demo) -> Iterator[None]:
    """This process as one of the demo's consoles: its laptop state under `demo.state`."""
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(demo.state)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = old


def carried_session(demo: Demo) -> Path:
    """The carried run's whole log as a session (`console jobs tail RUN --from-start
    --no-follow`): what an operator records after the box ran the pipeline with no console, to
    see and report what it did. Recorded once, in `root/carried.jsonl`."""
    session = demo.root / "carried.jsonl"
    if not session.exists():
        assert demo.carried is not None
        with demo_state(demo):
            rc = console_main(["jobs", "--host", "local", "--config", str(demo.console_toml),
                               "--session", str(session), "tail", demo.carried.run_dir.name,
                               "--from-start", "--no-follow"])
        assert rc == 0, f"console jobs tail of {demo.carried.run_dir.name} exited {rc}"
    return session


def console_env(demo: Demo) -> dict[str, str]:
    return {**os.environ, "XDG_STATE_HOME": str(demo.state), "PYTHONPATH": str(REPO)}


def console_process(demo: Demo, session: Path, *extra: str) -> subprocess.Popen[bytes]:
    """`console run --host local ARGS` in a process of its own (it can be killed)."""
    argv = [sys.executable, "-m", "console", "run", "--host", "local", "--config",
            str(demo.console_toml), "--session", str(session), *extra]
    with open(session.with_suffix(".out"), "wb") as out:  # the child keeps its own copy
        return subprocess.Popen(argv, cwd=REPO, env=console_env(demo), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def pipeline_runs(box: Path) -> list[Path]:
    """The box runner's run directories, oldest first."""
    return sorted((box / "runs").glob("*-pipeline-*")) if (box / "runs").is_dir() else []


def wait_for_record(run_dir: Path, needle: str, *, timeout: float,
                    proc: subprocess.Popen[bytes] | None = None) -> str:
    """The run's log once it holds `needle` (a piece of an @@eagle3 record)."""
    deadline = time.monotonic() + timeout
    log = run_dir / "log"
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if needle in text:
            return text
        if (run_dir / "exit.json").exists():
            raise AssertionError(f"the run ended before {needle!r} appeared:\n{text[-3000:]}")
        if proc is not None and proc.poll() is not None and not text:
            raise AssertionError(f"the console exited {proc.returncode} before the run started")
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} never appeared in {log}")


def new_run(box: Path, before: list[Path], *, timeout: float = 120.0,
            proc: subprocess.Popen[bytes] | None = None) -> Path:
    """The box runner's run directory that appears after `before` was listed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fresh = [r for r in pipeline_runs(box) if r not in before]
        if fresh:
            return fresh[-1]
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the console exited {proc.returncode} before it launched")
        time.sleep(0.1)
    raise AssertionError(f"no pipeline run appeared under {box / 'runs'}")


def consoles_alive(console_toml: Path) -> int:
    """Processes on this machine whose command line names `console_toml`: the consoles of
    this demo (the box runner and its stages never name it)."""
    needle = str(console_toml).encode()
    found = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found += needle in cmdline.read_bytes()
        except OSError:
            continue
    return found


def wait_ended(run_dir: Path, timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return dict(json.loads((run_dir / "exit.json").read_text()))
        except (OSError, ValueError):
            time.sleep(0.2)
    raise AssertionError(f"{run_dir} did not end in {timeout:.0f} s")


@pytest.fixture(scope="session")
def console_demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The demo after the box carried it alone; the next start's session in `root/first.jsonl`."""
    root = tmp_path_factory.mktemp("demo")
    box = root / "box"
    console_toml = root / "console.toml"
    console_toml.write_text(f'[hosts.local]\nworkdir = "{box}"\n')
    d = Demo(root, box, console_toml, box / "demo" / "pipeline.toml", box / "demo" / "out")
    console = console_process(d, root / "killed.jsonl", "--demo")
    try:
        run_dir = new_run(box, [], proc=console)
        at_kill = wait_for_record(run_dir, '"type":"start","stage":"extract"', timeout=900,
                                  proc=console)
        console.send_signal(signal.SIGKILL)
    finally:
        console.kill()
        rc = console.wait()
    seen = polls = 0
    deadline = time.monotonic() + CARRY_TIMEOUT
    while not (run_dir / "exit.json").exists() and time.monotonic() < deadline:
        seen += consoles_alive(console_toml)
        polls += 1
        time.sleep(0.5)
    exit_record = wait_ended(run_dir, 5)
    d.carried = Carried(run_dir, at_kill, (run_dir / "log").read_text(errors="replace"),
                        exit_record, rc, seen, polls)
    assert exit_record.get("returncode") == 0, d.carried.log[-4000:]
    # The next start, in this process: every stage done, nothing to run.
    with demo_state(d):
        assert run_local(d, root / "first.jsonl", "--demo") == 0
    return d
