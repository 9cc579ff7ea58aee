"""The console's part of training across boxes (`[train] hosts` in pipeline.toml; the box side
is pipeline/nodes.py): the boxes cannot reach each other over SSH, the console reaches them all,
so it resolves the hosts and starts the other boxes' ranks.

Before the run starts (`prepare`): every train host known in console.toml and reachable (one
line each, exit 2 or 3, nothing started), the first one is the run's own host (it holds the
rendezvous and gets the checkpoint), and each host's address: `train.addresses` when given,
else the address its sshd was reached on (SSH_CONNECTION on the box). The first box's runner
gets them in EAGLE3_TRAIN_NODES.

While following the run (`on_record`): when the first box's train stage prints its `nodes`
record (endpoint, rendezvous id, data digest), each other box gets the pipeline config, checks
its data and that the rendezvous answers (`python -m pipeline train-node --check`), then runs
its ranks as a detached job named `train-node` (it outlives the console like the runner).
A box that fails the check is one error line, and the first box's run is cancelled rather than
left waiting for a box that will not come.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

from pipeline import stages as stage_table
from remote.errors import EXIT_USAGE, ConnectionFailed, RemoteError, UsageError
from remote.jobs.client import JobLocked, RunInfo
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.pipeline_runner import QUIET_ENV, PipelineRunner, last_error
from remote.spine import events as ev
from remote.spine.events import Event

NODES_ENV = "EAGLE3_TRAIN_NODES"  # pipeline/nodes.py
NODE_JOB = "train-node"

Reach = Callable[[str], Awaitable[tuple[HostConfig, Transport]]]


class TrainNodes:
    def __init__(self, runner: PipelineRunner, reach: Reach) -> None:
        self.runner = runner
        self.reach = reach
        self.bus = runner.bus
        self.others: list[tuple[HostConfig, Transport, str]] = []  # host, transport, address
        self.config_text = ""
        self.config_name = "pipeline.toml"
        self.tasks: list[asyncio.Task[None]] = []
        self.started: set[str] = set()

    async def prepare(self, resolved: dict[str, Any], config: str) -> None:
        """Resolve and reach every train host before anything starts; set the runner's env."""
        hosts = [str(h) for h in resolved.get("train_hosts") or []]
        first = self.runner.host.name
        if hosts[0] != first:
            raise UsageError(f"train.hosts: the run is on {first} but train.hosts starts with "
                             f"{hosts[0]} (the first train host holds the rendezvous and gets "
                             f"the checkpoint): `console run --host {hosts[0]}`")
        given = [str(a) for a in resolved.get("train_addresses") or []]
        addresses = [given[0] if given else await self._address(self.runner.host,
                                                                self.runner.transport)]
        for i, name in enumerate(hosts[1:], start=1):
            try:
                host, transport = await self.reach(name)
            except UsageError as exc:
                raise UsageError(f"train.hosts: {exc}") from None
            except RemoteError as exc:
                raise ConnectionFailed(f"train.hosts: {name} is unreachable: {exc}") from None
            addr = given[i] if given else await self._address(host, transport)
            addresses.append(addr)
            self.others.append((host, transport, addr))
        self.runner.env[NODES_ENV] = json.dumps({"addresses": addresses})
        done = await self.runner.transport.run(["cat", config], timeout=60)
        if done.returncode != 0:
            raise UsageError(f"train.hosts: cannot read {config} on {first}: {done.stderr}")
        self.config_text, self.config_name = done.stdout, posixpath.basename(config)
        self.runner.emit_info(f"training across {', '.join(hosts)} at "
                              f"{', '.join(addresses)} (torchrun, c10d)")

    async def _address(self, host: HostConfig, transport: Transport) -> str:
        addr = await PipelineRunner(transport, host, self.bus).ssh_address()
        if not addr:
            raise UsageError(f"train.hosts: cannot tell {host.name}'s address (no SSH_CONNECTION "
                             "there: a local host or a container): set train.addresses")
        return addr

    async def on_record(self, event: Event, run_id: str) -> None:
        """The first box's `nodes` record (its console.info event, the record's fields kept):
        start the other boxes' ranks (once per rendezvous)."""
        rec = event.payload
        if not (event.kind == ev.CONSOLE_INFO and rec.get("nodes")
                and rec.get("stage") == stage_table.TRAIN):
            return
        rdzv = str(rec["run_id"])
        if rdzv in self.started:
            return
        self.started.add(rdzv)
        for host, transport, addr in self.others:
            try:
                await self._start(host, transport, addr, rec)
            except RemoteError as exc:
                self.bus.emit(ev.CONSOLE_ERROR, host.name, message=f"train on {host.name}: {exc}")
                self.bus.emit(ev.CONSOLE_WARNING, self.runner.host.name, message=(
                    f"cancelling the run on {self.runner.host.name}: {host.name} cannot join "
                    "its training"))
                await self.runner.jobs.cancel(run_id)
                return

    async def _start(self, host: HostConfig, transport: Transport, addr: str,
                     rec: dict[str, Any]) -> None:
        runner = PipelineRunner(transport, host, self.bus)
        followed = False
        try:
            followed = await self._launch(runner, addr, rec)
        finally:
            if not followed:  # else its tail closes it
                await runner.jobs.close()

    async def _launch(self, runner: PipelineRunner, addr: str, rec: dict[str, Any]) -> bool:
        host = runner.host
        jobs = await runner.jobs.list()
        if any(j.name == NODE_JOB and str(rec["run_id"]) in j.argv for j in jobs):
            return False  # started by an earlier console following this run
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / self.config_name
            local.write_text(self.config_text)
            config = await runner.remote_config(local)
        args = ["train-node", "--config", config, "--endpoint", str(rec["endpoint"]),
                "--local-addr", addr, "--run-id", str(rec["run_id"]), "--data", str(rec["data"])]
        rc, out, err = await runner._direct(*args, "--check", timeout=120)
        if rc != 0:
            raise UsageError(last_error(out, err)) if rc == EXIT_USAGE else RemoteError(
                last_error(out, err))
        src = await runner.source_dir()
        try:
            info = await runner.jobs.launch(runner._argv(*args), name=NODE_JOB,
                                            env={"PYTHONPATH": src, **QUIET_ENV}, cwd=src)
        except JobLocked as exc:
            raise RemoteError(f"a {NODE_JOB} job is already running there ({exc.run_id}): "
                               "cancel it first (`console jobs`)") from None
        self.bus.emit(ev.CONSOLE_INFO, host.name, message=(
            f"train: {host.name} joins at {rec['endpoint']} as job {info.run_id}"))
        self.tasks.append(asyncio.create_task(self._follow(runner, info)))
        return True

    async def _follow(self, runner: PipelineRunner, info: RunInfo) -> None:
        """The other box's log into the session (its records become events for that host)."""
        try:
            async with aclosing(runner.jobs.tail(info.run_id, offset=0)) as lines:
                async for _ in lines:
                    pass
            final = await runner.jobs.wait(info.run_id)
            if final.returncode != 0:
                self.bus.emit(ev.CONSOLE_ERROR, runner.host.name, message=(
                    f"train on {runner.host.name}: its ranks {final.state} (returncode "
                    f"{final.returncode}); its log: `console jobs tail --host "
                    f"{runner.host.name} {info.run_id}`"))
        finally:
            await runner.jobs.close()

    def stop_following(self) -> None:
        for task in self.tasks:
            task.cancel()

    async def close(self) -> None:
        """Wait for the other boxes' logs to end (they end with the training)."""
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
