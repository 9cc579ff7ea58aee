"""Extraction sharded across boxes (`[extract] hosts = [...]` in pipeline.toml; docs/pipeline.md,
"Sharded extraction"): the console's side, between prepare and the extract stage of the training
box's run.

1. `shard-plan` on the training box: the shards (contiguous, balanced by tokens, the same on
   every run) and which are gathered already.
2. One detached job per box (`python -m pipeline shard-extract`, its own engine) over its
   shard's samples, uploaded as JSON lines; a job already running for that shard is attached
   to, and a finished shard (its manifest matches) is not run again. Each job's log is tailed
   into the event stream with the box's name, so a replay shows every host.
3. Each finished shard is gathered at once (remote/ops/shard_gather.py): a box that shares the
   training box's output storage (remote/ops/shard_route.py) wrote it there, and it is placed
   with no byte through the console; a box the training box reaches copies it there box to box
   (remote/ops/shard_copy.py; `outcome.copied` counts it); any other box's shard is relayed
   through the console, only when the operator asked for that (`--relay-through-console`).
   `outcome.relayed` counts it.

A box is lost when it stops answering for `lost_after` checks in a row (one every `interval`
seconds, on a link that gives up reconnecting after a few tries), or when its job ends without
an exit record (killed, the box rebooted). Its shard is then rerun on another box: at once with
`reassign_lost`, or by the next `console run --reassign HOST`. The other shards go on and are
gathered either way, so a lost box costs only its own shard.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import posixpath
import tempfile
from collections import deque
from contextlib import aclosing
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.progress import PREFIX
from remote.errors import EXIT_USAGE, ConnectionFailed, RemoteError, StageFailed, UsageError
from remote.jobs.client import JobLocked, Jobs, RunInfo
from remote.link import aio
from remote.link.transport import Transport
from remote.link.upload import upload
from remote.ops.shard_gather import gather, gather_direct
from remote.pipeline_runner import QUIET_ENV, PipelineRunner, last_error
from remote.spine import events as ev
from remote.spine.bus import EventBus


@dataclass
class Box:
    """A shard box as this run uses it: its link, its uploaded pipeline and config."""

    name: str
    runner: PipelineRunner
    config: str = ""
    lost: str = ""  # why, once lost

    @property
    def transport(self) -> Transport:
        return self.runner.transport


@dataclass
class Plan:
    shards: list[dict[str, Any]]
    hosts: list[str]
    extract_dir: str
    train_jsonl: str
    complete: bool
    tag: str
    bytes_per_token: int = 0


@dataclass
class Outcome:
    ran: dict[int, str] = field(default_factory=dict)  # shard -> the box that extracted it
    gathered: list[int] = field(default_factory=list)
    lost: dict[str, str] = field(default_factory=dict)  # box -> why
    failed: dict[int, str] = field(default_factory=dict)  # shard -> why
    failed_on: dict[int, str] = field(default_factory=dict)  # shard -> the box it failed on
    packages: dict[int, dict[str, str]] = field(default_factory=dict)  # shard -> its stack
    relayed: int = 0  # hidden-state bytes that crossed the console
    copied: int = 0  # hidden-state bytes copied box to box (none through the console)


def check_hosts(hosts: list[str], known: set[str], reassign: set[str]) -> None:
    """Names only (before any box is contacted): every extract.hosts entry a console.toml host,
    every --reassign one of them, and a box left to run on."""
    unknown = [h for h in hosts if h not in known]
    if unknown:
        raise UsageError(f"extract.hosts names {unknown[0]!r}, which console.toml does not "
                         f"define (hosts: {', '.join(sorted(known))})")
    bad = sorted(reassign - set(hosts))
    if bad:
        raise UsageError(f"--reassign {bad[0]}: not one of extract.hosts ({', '.join(hosts)})")
    if hosts and not set(hosts) - reassign:
        raise UsageError("--reassign names every extract host: no box is left to extract on")


def stack_differences(packages: dict[int, dict[str, str]]) -> str:
    """'torch: 2.13.0 (shards 1, 2) vs 2.10.0 (shard 3); ...' for every package whose version
    differs between shards; '' when they all ran one stack."""
    parts = []
    names = sorted({name for p in packages.values() for name in p})
    for name in names:
        by: dict[str, list[int]] = {}
        for k in sorted(packages):
            by.setdefault(packages[k].get(name, "absent"), []).append(k + 1)
        if len(by) > 1:
            parts.append(f"{name}: " + " vs ".join(
                f"{v} (shard{'s' if len(ks) > 1 else ''} {', '.join(map(str, ks))})"
                for v, ks in by.items()))
    return "; ".join(parts)


async def shard_plan(home: PipelineRunner, config: str, *, force: bool) -> Plan:
    rc, out, err = await home._direct("shard-plan", "--config", config,
                                      *(["--force"] if force else []), timeout=600)
    if rc == EXIT_USAGE:
        raise UsageError(last_error(out, err))
    if rc != 0:
        raise StageFailed(f"shard-plan on {home.host.name}: {last_error(out, err)}")
    data = json.loads(out.strip().splitlines()[-1])
    tag = hashlib.sha256(f"{home.host.name}:{data['extract_dir']}".encode()).hexdigest()[:10]
    return Plan(list(data["shards"]), list(data["hosts"]), str(data["extract_dir"]),
                str(data["train_jsonl"]), bool(data["complete"]), tag,
                int(data.get("bytes_per_token", 0)))


@dataclass
class ShardedExtract:
    """One sharded extraction: every box's worker, the shards lost boxes leave, the outcome."""

    home: PipelineRunner
    config: str
    local_config: Path
    boxes: dict[str, Box]
    _: KW_ONLY
    reassign: set[str]
    reassign_lost: bool
    force: bool
    # Boxes that share the training box's output storage (the training box among them) write
    # their shards under `shared_dir`; the others' shards go through the console.
    shared: set[str] = field(default_factory=set)
    shared_dir: str = ""
    # Boxes the training box fetches from directly (box to box): name -> the address it
    # reaches them at; the port their one-shot copy server listens on (0: any).
    direct: dict[str, str] = field(default_factory=dict)
    copy_port: int = 0
    # train.data = local-shards: each box keeps its shard and builds its own extract and vocab
    # (`shard-extract --local`); nothing is gathered anywhere.
    local: bool = False
    interval: float = 1.0  # seconds between a box's liveness checks
    lost_after: int = 3  # failed checks in a row that make a box lost
    outcome: Outcome = field(default_factory=Outcome, init=False)
    _orphans: deque[dict[str, Any]] = field(default_factory=deque, init=False)
    _busy: int = field(default=0, init=False)

    @property
    def bus(self) -> EventBus:
        return self.home.bus

    def _emit(self, kind: str, host: str, **payload: Any) -> None:
        self.bus.emit(kind, host, **payload)

    async def run(self, plan: Plan, rows: list[str]) -> Outcome:
        """Every shard not gathered yet, extracted and gathered; raises when one could not be."""
        todo = [s for s in plan.shards if not s["gathered"]]
        n = len(plan.shards)
        own: dict[str, dict[str, Any]] = {}
        for s in todo:
            owner = plan.hosts[s["index"]]
            if owner in self.reassign:
                self._orphans.append(s)
            elif s["end"] > s["start"]:
                own[owner] = s
        for s in plan.shards:
            if s["gathered"]:
                self._emit(ev.CONSOLE_INFO, plan.hosts[s["index"]], message=(
                    f"shard {s['index'] + 1}/{n} (samples {s['start']}..{s['end'] - 1}) is "
                    f"gathered on {self.home.host.name} already"), shard=s["index"] + 1)
        workers = [h for h in plan.hosts if h not in self.reassign]
        await asyncio.gather(*(self._worker(self.boxes[h], own.get(h), plan, rows)
                               for h in workers))
        for s in self._orphans:
            self.outcome.failed.setdefault(s["index"], "no box was left to run it")
        mixed = stack_differences(self.outcome.packages)
        if mixed:
            self._emit(ev.CONSOLE_WARNING, self.home.host.name, message=(
                f"the shards were extracted with different stacks ({mixed}): their hidden "
                "states are not one extraction's to the last bit (docs/pipeline.md)"))
        return self.outcome

    async def _worker(self, box: Box, own: dict[str, Any] | None, plan: Plan,
                      rows: list[str]) -> None:
        """This box's own shard, then any shard a lost box left, until none is running."""
        if own is not None and not await self._do(box, own, plan, rows):
            return
        while True:
            if self._orphans:
                if not await self._do(box, self._orphans.popleft(), plan, rows):
                    return
            elif self._busy == 0:
                return
            else:
                await asyncio.sleep(0.2)

    async def _do(self, box: Box, shard: dict[str, Any], plan: Plan, rows: list[str]) -> bool:
        """Run and gather one shard on `box`; False once the box is lost."""
        self._busy += 1
        k, n = shard["index"], len(plan.shards)
        try:
            shard_dir, info = await self._launch(box, shard, plan, rows)
            lost = await self._follow(box, info.run_id)
            if lost:
                box.lost = self.outcome.lost[box.name] = lost
                what = (f"shard {k + 1}/{n} (samples {shard['start']}..{shard['end'] - 1})")
                if self.reassign_lost:
                    self._orphans.append(shard)
                    self._emit(ev.CONSOLE_WARNING, box.name, shard=k + 1, lost=lost, message=(
                        f"{box.name} lost while extracting {what}: {lost}; rerunning it on "
                        "another box"))
                else:
                    self.outcome.failed[k] = (
                        f"{box.name} lost while extracting {what}: {lost}; `console run "
                        f"--reassign {box.name}` reruns it on another box (or add "
                        "--reassign-lost)")
                return False
            self.outcome.ran[k] = box.name
            if self.local:  # it stays on its box: the box's own ranks train on it
                return True
            if box.name in self.direct and box.name not in self.shared:
                got = await gather_direct(self.home, self.config, plan.extract_dir, shard=k,
                                          start=shard["start"], box=box.runner,
                                          shard_dir=shard_dir, address=self.direct[box.name],
                                          port=self.copy_port)
            else:
                got = await gather(self.home, self.config, plan.extract_dir, shard=k,
                                   start=shard["start"], host=box.name, transport=box.transport,
                                   shard_dir=shard_dir, shared=box.name in self.shared)
            self.outcome.gathered.append(k)
            if got.transferred:
                self.outcome.relayed += got.bytes
            if got.copied:
                self.outcome.copied += got.bytes
            self.outcome.packages[k] = got.packages
            return True
        except (StageFailed, UsageError) as exc:
            self.outcome.failed[k] = f"shard {k + 1}/{n} on {box.name} failed: {exc}"
            self.outcome.failed_on[k] = box.name
            return True
        except ConnectionFailed as exc:
            box.lost = self.outcome.lost[box.name] = str(exc)
            if self.reassign_lost:
                self._orphans.append(shard)
            else:
                self.outcome.failed[k] = (f"shard {k + 1}/{n}: {box.name} unreachable ({exc}); "
                                          f"`console run --reassign {box.name}` reruns it")
            return False
        finally:
            self._busy -= 1

    async def _launch(self, box: Box, shard: dict[str, Any], plan: Plan,
                      rows: list[str]) -> tuple[str, RunInfo]:
        if not box.config:  # its pipeline and config uploaded, once per box
            await box.runner.source_dir()
            box.config = await box.runner.remote_config(self.local_config)
        k, n = shard["index"], len(plan.shards)
        base = posixpath.join(await box.runner.root(), "extract-shards", plan.tag)
        name = f"shard-{k + 1}-of-{n}"
        shard_dir = posixpath.join(base, name)
        if box.name in self.shared:  # written where the training box reads it: no transfer
            shard_dir = posixpath.join(self.shared_dir, plan.tag, box.name, name)
        with tempfile.TemporaryDirectory(prefix="eagle3-rows-") as tmp:
            local = Path(tmp) / f"{name}.jsonl"
            local.write_text("".join(r + "\n" for r in rows[shard["start"]:shard["end"]]))
            await upload(box.transport, local, posixpath.join(base, f"{name}.jsonl"),
                         python=box.runner.python, bus=self.bus, host=box.name)
        where = (["--local", "--start", str(shard["start"])] if self.local
                 else ["--dir", shard_dir])
        argv = [box.runner.python, "-m", "pipeline", "shard-extract", "--config", box.config,
                "--rows", posixpath.join(base, f"{name}.jsonl"), *where,
                *(["--force"] if self.force else [])]
        jobs = box.runner.jobs
        src = await box.runner.source_dir()
        try:
            info = await jobs.launch(argv, name=f"extract-{plan.tag}-{name}",
                                     env={"PYTHONPATH": src, **QUIET_ENV}, cwd=src)
            how = "started"
        except JobLocked as exc:
            info, how = await jobs.status(exc.run_id), "attached to"
        self._emit(ev.CONSOLE_INFO, box.name, shard=k + 1, run_id=info.run_id, message=(
            f"shard {k + 1}/{n} (samples {shard['start']}..{shard['end'] - 1}, "
            f"{shard['tokens']} tokens) {how} on {box.name}: {info.run_id}"))
        return shard_dir, info

    async def _follow(self, box: Box, run_id: str) -> str:
        """Follow the shard's job to its end: '' when it exited 0, else why the box counts as
        lost (raises StageFailed when the job failed on a box that is still there)."""
        jobs: Jobs = box.runner.jobs
        said = {"error": "", "line": ""}  # the job's last error record, else its last line

        async def to_end() -> RunInfo:
            async with aclosing(jobs.tail(run_id, offset=0)) as lines:
                async for line in lines:
                    if line.event is not None and line.event.kind == ev.CONSOLE_ERROR:
                        said["error"] = str(line.event.payload["message"])
                    elif not line.text.startswith(PREFIX) and line.text.strip():
                        said["line"] = line.text.strip()
            return await jobs.wait(run_id)

        tail = asyncio.create_task(to_end())
        watch = asyncio.create_task(self._watch(box))
        try:
            await asyncio.wait({tail, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (tail, watch):
                t.cancel()
            await asyncio.gather(tail, watch, return_exceptions=True)
        if watch.done() and not watch.cancelled() and watch.exception() is None:
            return str(watch.result())
        if tail.cancelled() or tail.exception() is not None:
            exc = None if tail.cancelled() else tail.exception()
            if isinstance(exc, RemoteError) and not isinstance(exc, ConnectionFailed):
                raise exc
            return f"its job could not be followed ({exc})"
        info = tail.result()
        if info.returncode == 0:
            return ""
        if info.state == "lost":
            return f"its job {run_id} ended without an exit record (killed, or the box rebooted)"
        why = (said["error"] or said["line"]).removeprefix("error: ") or "no output"
        raise StageFailed(f"{why} (job {run_id} {info.state}, returncode {info.returncode})")

    async def _watch(self, box: Box) -> str:
        """Returns (why) once the box failed `lost_after` checks in a row; runs until then."""
        fails, why = 0, ""
        while True:
            await asyncio.sleep(self.interval)
            try:
                done = await aio.wait_for(box.transport.run(["true"], timeout=10), 15)
                ok = done.returncode == 0
                why = "" if ok else f"`true` exited {done.returncode}"
            except (ConnectionFailed, TimeoutError, OSError) as exc:
                ok, why = False, str(exc) or type(exc).__name__
            fails = 0 if ok else fails + 1
            if fails >= self.lost_after:
                return f"no answer to {fails} checks in a row ({why})"
