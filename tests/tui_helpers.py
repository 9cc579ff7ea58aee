"""Helpers for the TUI tests: build apps on a replayed file or a live source with a controller
test double, wait for the event pump, and read what a widget shows as plain text."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Input, Static

from console.sessions.reader import SessionReader
from console.tui.app import ConsoleApp
from console.tui.controller import LiveSource, ReplaySource
from console.tui.dialogs import AskScreen
from remote.link.hosts import Config
from remote.spine import events as ev
from remote.spine.bus import EventBus
from tests.tui_sessions import COMPAT_RESULT, DIFF, HOST, MODEL_RESULT, WORKER

SIZE = (120, 36)
# What the real patcher lists after apply/verify: every recipe of the file, in effect or not.
IN_EFFECT = [{"name": "resolve-layers-path", "in_effect": True},
             {"name": "scheduler-is-encoder-decoder", "in_effect": False}]


def plain(widget: Static, width: int = SIZE[0]) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, legacy_windows=False)
    console.print(widget.content)
    return out.getvalue()


async def wait_for(pilot: Pilot[Any], cond: Callable[[], bool], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.02)


async def settle(pilot: Pilot[Any]) -> None:
    """Let the pump fold what is queued and the views process their messages."""
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    await wait_for(pilot, lambda: not app._pending and not app.seeking)
    app.drain()
    await pilot.pause()
    await pilot.pause()


def replay_app(path: Path, *, speed: float = float("inf"), paused: bool = False,
               start_screen: str | None = None) -> ConsoleApp:
    return ConsoleApp(ReplaySource(SessionReader(path), speed=speed, paused=paused), start_screen=start_screen)


async def finish_replay(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    await wait_for(pilot, lambda: app.replayer is not None and app.replayer.finished)
    await settle(pilot)


@asynccontextmanager
async def replayed(path: Path, *, start_screen: str | None = None, size: tuple[int, int] = SIZE,
                   speed: float = float("inf")) -> AsyncIterator[tuple[ConsoleApp, Pilot[Any]]]:
    """The app over a session file, running, with the whole file replayed: what most replay
    tests look at."""
    app = replay_app(path, speed=speed, start_screen=start_screen)
    async with app.run_test(size=size) as pilot:
        await finish_replay(pilot)
        yield app, pilot


class ScriptedController:
    """Test double for the remote layer (the probe runner, patcher and pipeline runner are other
    issues): each action records the call and publishes the events the real module emits, in the
    brief's payload shapes, so the screens are driven exactly as by a live box."""

    live = True

    def __init__(self, bus: EventBus, host: str = HOST) -> None:
        self.bus = bus
        self.host = host
        self.calls: list[tuple[str, ...]] = []

    async def connect(self, host: str) -> None:
        self.calls.append(("connect", host))
        self.bus.emit(ev.CONNECTION_UP, host)

    async def run_probe(self, host: str, probe: str, target: str | None = None) -> None:
        self.calls.append(("probe", host, probe))
        result = {"model": MODEL_RESULT, "compat": COMPAT_RESULT}.get(probe, {"python": "3.12.3"})
        self.bus.emit(ev.PROBE_RESULT, host, probe=probe, result=result)

    async def plan_patch(self, host: str) -> None:
        self.calls.append(("plan", host))
        self.bus.emit(ev.PATCH_PLANNED, host, file=WORKER, diff=DIFF,
                      recipes=[{"name": "resolve-layers-path", "applies": True, "reason": ""},
                               {"name": "scheduler-is-encoder-decoder", "applies": False,
                                "reason": "already present"}])

    async def apply_patch(self, host: str, file: str) -> None:
        self.calls.append(("apply", host, file))
        self.bus.emit(ev.PATCH_APPLIED, host, file=file, recipes=IN_EFFECT, sha256="cd" * 32)

    async def verify_patch(self, host: str, file: str) -> None:
        self.calls.append(("verify", host, file))
        self.bus.emit(ev.PATCH_VERIFIED, host, file=file, recipes=IN_EFFECT, sha256="cd" * 32)

    async def rollback_patch(self, host: str, file: str) -> None:
        self.calls.append(("rollback", host, file))
        self.bus.emit(ev.PATCH_ROLLED_BACK, host, file=file,
                      recipes=[{"name": "resolve-layers-path", "in_effect": False}], sha256="ef" * 32)

    async def start_stage(self, host: str, stage: str) -> None:
        self.calls.append(("start", host, stage))
        self.bus.emit(ev.STAGE_START, host, stage=stage, run_id=f"r-{stage}")
        self.bus.emit(ev.JOB_STARTED, host, run_id=f"r-{stage}", name=stage, argv=["python"], pid=1, log="log")
        for i in range(3):
            self.bus.emit(ev.JOB_LINE, host, run_id=f"r-{stage}", name=stage, text=f"{stage} line {i}", offset=i)
        self.bus.emit(ev.STAGE_PROGRESS, host, stage=stage, done=3, total=10, unit="steps")

    async def resume_pipeline(self, host: str) -> None:
        self.calls.append(("resume", host))

    async def cancel_stage(self, host: str, stage: str, run_id: str | None = None) -> None:
        self.calls.append(("cancel", host, stage))
        self.bus.emit(ev.JOB_EXIT, host, run_id=f"r-{stage}", name=stage, state="cancelled", returncode=-15)
        self.bus.emit(ev.STAGE_END, host, stage=stage, ok=False, seconds=1.0)

    async def aclose(self) -> None:
        return None


class FixedHostsSource(LiveSource):
    def __init__(self, hosts: list[str], controller_factory: Callable[[EventBus], Any] | None = None) -> None:
        bus = EventBus()
        super().__init__(Config(hosts={}, path=Path("console.toml")), bus,  # its hosts' config
                         controller=controller_factory(bus) if controller_factory else None)
        self._names = hosts

    def host_names(self) -> list[str]:
        return self._names


def live_app(*, start_screen: str | None = None, hosts: list[str] | None = None,
             scripted: bool = True) -> ConsoleApp:
    source = FixedHostsSource(hosts or [HOST], ScriptedController if scripted else None)
    return ConsoleApp(source, describe={HOST: "root@box"}, start_screen=start_screen)


async def detached_local_job(workdir: Path, argv: list[str], name: str) -> str:
    """A real detached run (remote/jobs/client.py) on the local host, left running with the
    launching connection closed, as a console that connects later finds it: its run id."""
    import sys

    from remote.jobs.client import Jobs
    from remote.link.transport import LocalTransport

    transport = LocalTransport("local")
    await transport.connect()
    jobs = Jobs(transport, str(workdir), host="local", bus=EventBus(), python=sys.executable)
    info = await jobs.launch(argv, name=name)
    await jobs.close()
    await transport.close()
    return info.run_id


@asynccontextmanager
async def live_started(*, start_screen: str | None = None, size: tuple[int, int] = SIZE,
                       hosts: list[str] | None = None
                       ) -> AsyncIterator[tuple[ConsoleApp, Pilot[Any]]]:
    """`live_app` running, its first events folded."""
    app = live_app(start_screen=start_screen, hosts=hosts)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        yield app, pilot


@asynccontextmanager
async def over_detached_job(workdir: Path, argv: list[str], name: str, start_screen: str
                            ) -> AsyncIterator[tuple[ConsoleApp, Pilot[Any], str]]:
    """The live console over the local host where a detached run (`argv`) already runs, as an
    operator who starts the console after launching finds it: the app (settled, not yet
    connected), its pilot and the run's id."""
    run_id = await detached_local_job(workdir, argv, name)
    app = local_app(workdir, start_screen)
    async with app.run_test(size=SIZE) as pilot:
        # Keys pressed before Textual's own start-up activation of the first tab is processed
        # can be undone by it: let the app settle first, as an operator's first key would.
        await settle(pilot)
        yield app, pilot, run_id


def local_app(workdir: Path, start_screen: str) -> ConsoleApp:
    """The live console over the local host, its box work under `workdir` (not connected yet)."""
    import sys

    from remote.link.hosts import HostConfig

    hc = HostConfig(name="local", python=sys.executable, workdir=str(workdir))
    return ConsoleApp(LiveSource(Config(hosts={"local": hc}, path=None)), start_screen=start_screen)


async def refused_options(app: ConsoleApp, pilot: Pilot[Any], key: str, default: str, options: str,
                          title: str) -> str:
    """Press `key`, see its dialog offer the defaults (`default` among them), enter `options`:
    the notice `title` comes, an error; its message."""
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, AskScreen))
    assert default in app.screen.query_one(Input).value  # the defaults, editable
    app.screen.query_one(Input).value = options
    await pilot.press("enter")
    await wait_for(pilot, lambda: any(t == title for t, _, _ in app.notice_log))
    _, severity, message = next(n for n in app.notice_log if n[0] == title)
    assert severity == "error", message
    return message
