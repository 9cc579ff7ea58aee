"""What the TUI can ask of the box, and where its events come from. No Textual here.

The app is handed a `Source`: a live one (hosts from console.toml, actions go to the remote
layer, events come from it) or a replay (events come from a session file, actions are refused).
Either way the app only sees an EventBus and a `Controller`, so "disconnected / reconnecting"
and "replay" are states like any other, testable without a terminal or a box.

A key reaches the box in two hops: its action (console/tui/box_actions.py) calls a typed method
of the Controller, which calls the operation (remote/ops/) that the headless command calls too.
Each method imports its operation when it runs: the console's first paint does not wait for the
transports, httpx or the patcher.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from console.errors import ReadOnlyReplay
from console.sessions.reader import SessionReader
from console.sessions.replay import Replayer
from remote.errors import UsageError
from remote.link.hosts import LOCAL, Config, HostConfig, all_hosts
from remote.link.transport import Transport
from remote.spine import event_types as et
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event

# Seconds between two /metrics scrapes of the live acceptance (one window each): long enough
# that a window holds a few hundred drafts at a CPU's decode rate, short enough to watch.
WATCH_INTERVAL_S = 5.0


class Controller(Protocol):
    """Actions the operator can take; each publishes its results as events on the bus."""

    live: bool

    async def connect(self, host: str) -> None: ...
    async def accept_host_key(self, host: str, fingerprint: str) -> None: ...
    async def run_probe(self, host: str, probe: str, target: str | None = None) -> None: ...
    async def plan_patch(self, host: str) -> None: ...
    async def apply_patch(self, host: str, file: str) -> None: ...
    async def verify_patch(self, host: str, file: str) -> None: ...
    async def rollback_patch(self, host: str, file: str) -> None: ...
    async def start_stage(self, host: str, stage: str) -> None: ...
    async def resume_pipeline(self, host: str) -> None: ...
    async def cancel_stage(self, host: str, stage: str, run_id: str | None = None) -> None: ...
    async def serve_start(self, host: str, role: str, pipeline: str | None = None) -> None: ...
    async def serve_stop(self, host: str) -> None: ...
    async def run_bench(self, host: str, options: str, baseline_url: str | None = None) -> None: ...
    async def run_matrix(self, host: str, options: str) -> None: ...
    async def aclose(self) -> None: ...


class ReplayController:
    live = False

    async def _refuse(self, *_: object, **__: object) -> None:
        raise ReadOnlyReplay("this is a replay: actions that drive the box are disabled")

    connect = accept_host_key = run_probe = plan_patch = apply_patch = verify_patch = rollback_patch = _refuse
    start_stage = resume_pipeline = cancel_stage = serve_start = serve_stop = run_bench = _refuse
    run_matrix = _refuse

    async def aclose(self) -> None:
        return None


class LiveController:
    """Drives real hosts: one transport per host, each action its operation in remote/ops/."""

    live = True

    def __init__(self, config: Config, bus: EventBus,
                 transport_factory: Callable[[HostConfig, EventBus], Transport] | None = None) -> None:
        self.config = config
        self.bus = bus
        self.transports: dict[str, Transport] = {}
        self._factory = transport_factory
        self._lock = asyncio.Lock()
        self._background: dict[str, asyncio.Task[Any]] = {}
        # The plans the Patch screen shows (the latest patch.planned per host and file): what
        # the operator confirms when they apply, checked against a fresh plan (remote/ops/patch).
        self._shown: dict[str, dict[str, et.PatchPlanned]] = {}
        # Runs this console tails now (the box runner, reattached jobs): a start that attaches
        # to one of them waits for its end instead of tailing it a second time.
        self.following: set[str] = set()
        self.seen_runs: set[str] = set()  # finished runs whose logs were read on connect: once
        bus.add_callback(self._note_plan)

    def _note_plan(self, event: Event) -> None:
        if event.kind == ev.PATCH_PLANNED:
            data = event.data()
            if isinstance(data, et.PatchPlanned):
                self._shown.setdefault(event.host, {})[data.file] = data

    async def transport(self, name: str, **ssh_kwargs: Any) -> Transport:
        """The host's transport, connected on first use. `ssh_kwargs` (accept_new_host_key=)
        go to the SSH transport, as `console`'s --accept-new-host-key does."""
        async with self._lock:
            if name in self.transports:
                return self.transports[name]
            hc = self.config.host(name)
            if self._factory is not None and not ssh_kwargs:
                t = self._factory(hc, self.bus)
            else:
                from remote.link.connect import make_transport

                t = make_transport(hc, bus=self.bus, **ssh_kwargs)
            await t.connect()
            self.transports[name] = t
            return t

    async def accept_host_key(self, host: str, fingerprint: str) -> None:
        """Connect, trusting the host's new key if it is the one with `fingerprint` (what the
        operator was shown): stored in known_hosts as `console probe --accept-new-host-key`
        stores it (remote/link/ssh.py). Another new key is refused again; a changed key always."""
        if not fingerprint:
            raise UsageError("no fingerprint to trust: connect first (c)")
        await self.connect(host, accept_new_host_key=fingerprint)

    async def connect(self, host: str, **ssh_kwargs: Any) -> None:
        """Connect (or reconnect after a drop). The SSH transport announces its own connection
        events; for the local transport this says it. `ssh_kwargs`: as `transport`'s."""
        existing = self.transports.get(host)
        if existing is not None:
            if not existing.connected:
                await existing.connect()
                if self.config.host(host).is_local:
                    self.bus.emit(ev.CONNECTION_UP, host, summary=f"connected to {host}")
            return
        try:
            await self.transport(host, **ssh_kwargs)
        except Exception as exc:
            self.bus.emit(ev.CONNECTION_DOWN, host, error=str(exc), summary=f"{host}: {exc}")
            raise
        if self.config.host(host).is_local:
            self.bus.emit(ev.CONNECTION_UP, host, summary=f"connected to {host}")
        from remote.ops import pipeline, stats

        # 10 samples a second unless the host's `stats_interval` says otherwise
        self._start_background(host, "stats", "live stats", lambda t, hc: stats.stream(
            t, hc, self.bus, interval=hc.stats_interval, alerts=self.config.alerts))
        self._start_background(host, "jobs.reattach", "job tails", lambda t, hc: pipeline.reattach(
            t, hc, self.bus, following=self.following, seen=self.seen_runs))
        self._background[f"serve.check:{host}"] = asyncio.create_task(
            self._watch_if_serving(host), name=f"serve-check-{host}")

    async def _watch_if_serving(self, host: str) -> None:
        """The servers already running on the box shown as their starter showed them, the
        speculative one's live acceptance watched from the start; then the bench results kept
        on the box, in the Bench screen's table."""
        from console.bench_tables import point_summary
        from remote.ops import bench, serve

        t, hc = await self._on(host)
        try:
            async with serve.runner(t, hc, self.bus) as r:
                spec = (await serve.found(r)).get("speculative")
        except Exception as exc:  # the box said no: the rest still works
            self.bus.emit(ev.CONSOLE_INFO, host, message=f"serve status: {exc}")
            spec = None
        if spec is not None and spec.ready:
            self.watch_acceptance(host)
        try:
            await bench.found_results(t, hc, self.bus, seen=self.seen_runs, point_text=point_summary)
        except Exception as exc:  # the box said no: the rest still works
            self.bus.emit(ev.CONSOLE_INFO, host, message=f"bench results on the box: {exc}")

    def watch_acceptance(self, host: str) -> None:
        """Live acceptance per window (`console bench watch`) while the server answers."""
        from remote.ops import bench

        self._start_background(host, "bench.watch", "live acceptance", lambda t, hc: bench.watch(
            t, hc, self.bus, interval=WATCH_INTERVAL_S, count=None, model=None, windows=[]))

    def _stop_background(self, host: str, action: str) -> None:
        task = self._background.pop(f"{action}:{host}", None)
        if task is not None:
            task.cancel()

    def _start_background(self, host: str, action: str, label: str,
                          work: Callable[[Transport, HostConfig], Awaitable[object]]) -> None:
        """Streams that run as long as the console (live stats, reattached job tails)."""
        transport = self.transports[host]

        async def stream() -> None:
            try:
                await work(transport, self.config.host(host))
            except Exception as exc:  # it failed: say so once, keep the console up
                self.bus.emit(ev.CONSOLE_ERROR, host, message=f"{label} stopped: {exc}")

        self._stop_background(host, action)
        self._background[f"{action}:{host}"] = asyncio.create_task(stream(), name=f"{action}-{host}")

    async def _on(self, host: str) -> tuple[Transport, HostConfig]:  # connected on first use
        return await self.transport(host), self.config.host(host)

    async def run_probe(self, host: str, probe: str, target: str | None = None) -> None:
        """A probe as `console probe` runs it (its row in remote/probe_table.py; model and
        compat read `target`); results arrive as probe.* events."""
        from remote.ops import probes
        from remote.probe_table import ProbeRequest

        await probes.run(*await self._on(host), self.bus, probe, ProbeRequest.from_target(target))

    async def plan_patch(self, host: str) -> None:
        from remote.ops import patch

        await patch.plan(patch.patcher(*await self._on(host), self.bus))

    async def apply_patch(self, host: str, file: str) -> None:
        """The operator confirmed in the Patch screen: apply, if a fresh plan is still the one
        the screen showed (its patch.planned events), else refuse (exit 4)."""
        from remote.ops import patch

        await patch.apply(patch.patcher(*await self._on(host), self.bus),
                          shown=list(self._shown.get(host, {}).values()))

    async def verify_patch(self, host: str, file: str) -> None:
        from remote.ops import patch

        await patch.verify(patch.patcher(*await self._on(host), self.bus))

    async def rollback_patch(self, host: str, file: str) -> None:
        from remote.ops import patch

        await patch.rollback(patch.patcher(*await self._on(host), self.bus))

    async def start_stage(self, host: str, stage: str) -> None:
        """Run one stage now (even if its manifest matches) and the stages it leaves out of
        date: one box runner that carries on through evaluate if the console quits."""
        from remote.ops import pipeline

        runner, config, demo_dir = await pipeline.box_pipeline(*await self._on(host), self.bus)
        await pipeline.start_stage(runner, config, stage, demo_dir=demo_dir, following=self.following)

    async def resume_pipeline(self, host: str) -> None:
        """Every remaining stage in order, skipping those whose manifest matches (what `console
        run` does): one box runner, or the one already running (attached, not started twice)."""
        from remote.ops import pipeline

        runner, config, demo_dir = await pipeline.box_pipeline(*await self._on(host), self.bus)
        await pipeline.run_pipeline(runner, config, demo_dir=demo_dir, following=self.following)

    async def auto_reattach(self, hosts: list[str]) -> None:
        """At start: connect to each host where this laptop started or attached to a pipeline
        run, so a run still going is tailed again and finished stages show from their
        manifests, without a key. Off with `auto_reattach = false` under [console]."""
        from remote.ops.pipeline import remembered_hosts

        # A failed connect said so itself (connection.down); the others still go on.
        await asyncio.gather(*(self.connect(name) for name in remembered_hosts(
            [self.config.host(n) for n in hosts], self.bus)), return_exceptions=True)

    async def cancel_stage(self, host: str, stage: str, run_id: str | None = None) -> None:
        """Cancel the run behind a stage (its process group on the box: TERM, then KILL)."""
        from remote.ops import pipeline

        if not run_id:
            raise UsageError(f"no run is known for stage {stage!r}: nothing to cancel")
        await pipeline.cancel(*await self._on(host), self.bus, run_id)

    async def serve_start(self, host: str, role: str, pipeline: str | None = None) -> None:
        """`console serve start [--baseline] --pipeline FILE | --demo`, returning once the
        server answers; EngineFailed (with the engine log's tail) when it dies."""
        from remote.ops import serve

        path, vllm_args = serve.options(pipeline, None, demo=pipeline is None)
        async with await serve.server(*await self._on(host), self.bus) as r:
            await serve.start(r, role, pipeline=path, vllm_args=vllm_args)
        if role == "speculative":
            self.watch_acceptance(host)

    async def serve_stop(self, host: str) -> None:
        """`console serve stop`: cancel the serve jobs (their process groups)."""
        from remote.ops import serve

        self._stop_background(host, "bench.watch")
        async with serve.runner(*await self._on(host), self.bus) as r:
            stopped = await serve.stop(r)
        if not stopped:
            self.bus.emit(ev.CONSOLE_INFO, host, message=f"no serve job running on {host}")

    async def run_bench(self, host: str, options: str, baseline_url: str | None = None) -> None:
        """`console bench run OPTIONS` against the host's server; when the baseline server runs
        (and the options name no baseline) it is measured first, as --baseline-url does. Its
        result is kept on the box too (noted as seen: a reconnect does not show it twice)."""
        from console.bench_tables import point_summary
        from console.commands.bench import parse_options, result_path, run_plan
        from remote.bench.served import offline_vs_served
        from remote.ops import bench

        args = parse_options(options, host)
        settings, label, earlier = run_plan(args)
        if not (args.baseline or args.baseline_url or args.no_speculation):
            args.baseline_url = baseline_url
        done = await bench.run(*await self._on(host), self.bus, settings, label=label,
                               out_path=result_path(args, label, kind="tui-bench"),
                               point_text=point_summary, speculative=not args.no_speculation,
                               baseline_url=args.baseline_url, earlier=earlier,
                               offline_path=args.offline)
        if done.box_path is not None:
            self.seen_runs.add(f"bench:{done.box_path}")
        if done.served is not None or done.offline is not None:
            self.bus.emit(ev.CONSOLE_INFO, host, message=offline_vs_served(done.offline, done.served),
                          offline=done.offline, served=done.served)

    async def run_matrix(self, host: str, options: str) -> None:
        """`console bench matrix OPTIONS` on the host: its plan, each cell (with the ETA) and
        its end are bench.matrix events, which the Bench screen shows as they come."""
        from console.commands.bench import parse_options
        from console.commands.bench_matrix import matrix_path, matrix_plan, resume_or_new
        from remote.ops import matrix, serve

        self._stop_background(host, "bench.watch")  # the matrix starts and stops its own servers
        args = parse_options(options, host, "matrix")
        plan, prompts = matrix_plan(args)
        pipeline, vllm_args = serve.options(args.pipeline, args.vllm_args, demo=args.demo)
        path = matrix_path(args, plan)
        m = resume_or_new(path, plan, host, force=args.force)
        runner = await serve.server(*await self._on(host), self.bus, python=args.python)
        await matrix.run_matrix(runner, m, prompts, pipeline=pipeline, vllm_args=vllm_args,
                                out_path=path, start_timeout=args.start_timeout,
                                request_timeout=args.timeout)

    async def aclose(self) -> None:
        for task in self._background.values():
            task.cancel()
        for task in self._background.values():
            # Asked again until it ends: a cancel can be lost in a library's race (3.11's
            # wait_for, remote/link/aio.py), and a close that waits forever loses the session.
            while not task.done():
                await asyncio.wait({task}, timeout=1.0)
                task.cancel()
            if not task.cancelled():
                task.exception()  # retrieved: a failure on the way out is not news
        self._background.clear()
        for t in list(self.transports.values()):
            try:
                await t.close()
            except Exception:  # best effort on the way out
                pass
        self.transports.clear()


class Source(Protocol):
    """Where the app's events come from and where its actions go."""

    mode: str  # "live" | "replay"
    bus: EventBus
    controller: Controller

    def host_names(self) -> list[str]: ...
    async def run(self) -> None: ...


class LiveSource:
    mode = "live"

    def __init__(self, config: Config, bus: EventBus | None = None,
                 controller: Controller | None = None) -> None:
        self.config = config
        self.bus = bus or EventBus()
        self.controller: Controller = controller or LiveController(config, self.bus)

    def host_names(self) -> list[str]:
        return [h.name for h in all_hosts(self.config)] or [LOCAL]

    async def run(self) -> None:
        """Live events arrive as the operator acts; at start the hosts with a pipeline run
        this laptop followed are reconnected to (unless console.toml turns it off)."""
        if self.config.auto_reattach and isinstance(self.controller, LiveController):
            await self.controller.auto_reattach(self.host_names())


class ReplaySource:
    mode = "replay"

    def __init__(self, reader: SessionReader, *, speed: float = 1.0, paused: bool = False,
                 bus: EventBus | None = None) -> None:
        self.reader = reader
        self.bus = bus or EventBus()
        self.controller: Controller = ReplayController()
        self.replayer = Replayer(reader, self.bus, speed=speed)
        if not paused:
            self.replayer.play()

    def host_names(self) -> list[str]:
        names = list(self.reader.header.hosts)
        return names or [LOCAL]

    async def run(self) -> None:
        await self.replayer.run()

