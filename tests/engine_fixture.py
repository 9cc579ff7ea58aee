"""One real vLLM engine for the whole test session, on a box reached through the loopback sshd.

Why session scope: an engine takes 30-60 s to start on this machine's shared cores; every test
that needs a live server shares this one (registered in conftest.py, so any test module can ask
for `engine_box` or `served_engine`). At most one engine runs at a time: `EngineBox.use(role)`
stops the running server before starting another, and `release()` hands the box to a test that
starts its own (the demo loop starts the baseline and the speculative server in turn).

The box is a host whose `python` is the real box environment (scripts/box_env.py: vLLM 0.32 CPU
+ speculators 0.9), reached over SSH like a container on a GPU box. Its demo pipeline is the
session's one trained demo (tests/demo_fixture.py: `console run --host local --demo` with the
main .venv, speculators 0.3, exactly as `make demo` does), linked in as `workdir/demo`; the
server loads that head through the pipeline's own train/speculative_config.json. A missing
engine environment fails the fixture (tests/box_env.py builds it or raises), it never skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from console.cli import main as console_main
from console.sessions.reader import SessionReader
from pipeline import progress
from remote.pipeline_runner import QUIET_ENV
from remote.spine import events as ev
from tests import box_env
from tests.demo_fixture import Demo
from tests.sshd_harness import Sshd, free_port

REPO = Path(__file__).resolve().parents[1]
HOST = "engbox"


@dataclass
class EngineBox:
    root: Path
    workdir: Path
    console_toml: Path
    python: Path
    port: int
    running: dict[str, str] = field(default_factory=dict)  # role -> session file of its start

    @property
    def demo_dir(self) -> Path:
        return self.workdir / "demo"

    @property
    def out(self) -> Path:
        return self.demo_dir / "out"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def demo_config(self, path: Path, *edits: tuple[str, str]) -> Path:
        """The demo's pipeline config written to `path`: its output_dir beside it (path.parent /
        out), the target and conversations where the demo keeps them, then each (old, new) of
        `edits` made. Every old text must be there: a demo config that changed fails here."""
        demo = self.demo_dir
        text = (demo / "pipeline.toml").read_text()
        for old, new in (('output_dir = "out"', f'output_dir = "{path.parent / "out"}"'),
                         ('model = "target"', f'model = "{demo / "target"}"'),
                         ('dataset = "conversations.jsonl"', f'dataset = "{demo / "conversations.jsonl"}"'),
                         *edits):
            assert old in text, old
            text = text.replace(old, new)
        path.write_text(text)
        return path

    def cli(self, *args: str, session: Path | None = None) -> int:
        """`console ARGS --host engbox --config console.toml`, recorded to `session`. From an
        async test (its event loop running: the console's own asyncio.run would refuse), the
        command runs in a thread with a loop of its own, the test's loop blocked meanwhile."""
        rec = ["--session", str(session)] if session else ["--no-record"]
        argv = [*args, "--host", HOST, "--config", str(self.console_toml), *rec]
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return console_main(argv)
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(console_main, argv).result()

    def cli_process(self, *args: str, session: Path | None = None) -> int:
        """`cli` in a process of its own: for a check made while this process's console is
        busy (a test's hook inside a running `bench matrix` cannot re-enter its event loop)."""
        rec = ["--session", str(session)] if session else ["--no-record"]
        done = subprocess.run([sys.executable, "-m", "console", *args, "--host", HOST,
                               "--config", str(self.console_toml), *rec], cwd=REPO,
                              capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-2000:])
        return done.returncode

    def use(self, role: str = "speculative") -> Path:
        """The server of `role` running (started once); the session file of its start."""
        if role in self.running:
            return Path(self.running[role])
        self.release()
        session = self.root / f"serve-{role}-{len(os.listdir(self.root))}.jsonl"
        args = ["serve", "start", "--demo"] + (["--baseline"] if role == "baseline" else [])
        rc = self.cli(*args, session=session)
        if rc != 0:
            raise AssertionError(f"console serve start ({role}) exited {rc}: "
                                 + "; ".join(e.payload.get("message", "") for e in
                                             events(session) if e.kind == ev.CONSOLE_ERROR))
        self.running[role] = str(session)
        return session

    def release(self) -> None:
        """Stop every server this fixture started (a test may then start its own). A stop that
        fails is said here: a server left running holds the port every later engine test
        starts on, and they would fail far from the cause."""
        if self.running:
            rc = self.cli("serve", "stop")
            if rc != 0:
                raise AssertionError(f"console serve stop exited {rc}: the servers "
                                     f"{sorted(self.running)} may still hold port {self.port}")
            self.running.clear()


def answers(url: str) -> bool:
    """A vLLM server answers at `url` (its model list): how the engine tests tell a server that
    is up from one that was stopped."""
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def metrics(url: str) -> str:
    """The Prometheus text of the vLLM server at `url`."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        return str(resp.read().decode())


def served_spec(box: EngineBox) -> dict[str, object] | None:
    """The --speculative-config of the box's newest serve job (None: served without one), from
    the job's own record of its argv in its log: what the engine was really started with."""
    logs = sorted(box.workdir.glob("runs/*/log"), key=lambda p: p.stat().st_mtime)
    text = logs[-1].read_text()
    for line in text.splitlines():
        if line.startswith("@@eagle3 ") and '"stage":"serve"' in line.replace(" ", ""):
            argv = json.loads(line[len("@@eagle3 "):])["argv"]
            if "--speculative-config" not in argv:
                return None
            return dict(json.loads(argv[argv.index("--speculative-config") + 1]))
    raise AssertionError(f"no serve record in {logs[-1]}")


def events(session: Path) -> list[ev.Event]:
    with SessionReader(session) as reader:
        return list(reader.events())


def link_demo(demo: Demo, demo_dir: Path) -> None:
    """`demo_dir` is the session's trained demo (a link: the manifests key inputs by resolved
    path, so a copy would retrain). `python -m pipeline demo-setup` + `all` on it, as a user
    runs them by hand, must find the demo built and every stage complete."""
    demo_dir.symlink_to(demo.demo_dir, target_is_directory=True)
    env = {**os.environ, **QUIET_ENV, "PYTHONPATH": str(REPO)}
    for args in (["demo-setup", "--dir", str(demo_dir)],
                 ["all", "--config", str(demo_dir / "pipeline.toml")]):
        done = subprocess.run([sys.executable, "-m", "pipeline", *args], env=env, cwd=REPO,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise AssertionError(f"python -m pipeline {args[0]} failed ({done.returncode}):\n"
                                 + "\n".join((done.stderr or done.stdout).splitlines()[-20:]))
    records = [r for r in map(progress.parse, done.stdout.splitlines()) if r is not None]
    skipped = [r["stage"] for r in records if r["type"] == "skipped"]
    assert skipped == ["prepare", "extract", "vocab", "train", "evaluate"], records


@pytest.fixture(scope="session")
def engine_box(sshd: Sshd, console_demo: Demo,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineBox]:
    python = box_env.ensure("vllm032")
    root = tmp_path_factory.mktemp("engine")
    workdir = root / "box"
    workdir.mkdir()
    port = free_port()
    toml = sshd.console_toml(root / "console.toml", HOST, runtime="none", python=python,
                             workdir=workdir, vllm_url=f"http://127.0.0.1:{port}")
    box = EngineBox(root=root, workdir=workdir, console_toml=toml, python=python, port=port)
    link_demo(console_demo, box.demo_dir)
    try:
        yield box
    finally:
        box.release()


@pytest.fixture
def served_engine(engine_box: EngineBox) -> EngineBox:
    """engine_box with its speculative server (target + the demo's trained head) answering.
    Per test, not per session: a test between two of its users may release the box or start
    another role (one engine at a time), and `use` restarts the server only then. Its users
    are one xdist group (tests/conftest.py ENGINE_GROUPS): under `make test` they run on one
    worker back to back, with nothing in between to release the box."""
    engine_box.use("speculative")
    return engine_box
