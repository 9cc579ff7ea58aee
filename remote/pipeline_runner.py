"""The EAGLE-3 pipeline on a box: upload it, validate the config, start ONE detached runner on
the box that carries every remaining stage through evaluate, and follow its log.

The runner (`python -m pipeline run`, pipeline/sequence.py) is one detached job named
`pipeline`: it outlives the console, the SSH connection and the laptop, and its name lock means a
second start while it runs attaches to it instead of starting another. Its log carries the
stages' `@@eagle3 {...}` records, which the job tail itself turns into stage.* events
(remote/jobs/stage_records.py), so following it live, reattaching after a restart and replaying
the session show the same progress. This side folds those events for the outcome
(remote/spine/stage_life.py: what ran, what was skipped, which stage failed and why, what was
not reached).
"""

from __future__ import annotations

import importlib.util
import json
import posixpath
from collections.abc import Awaitable, Callable
from contextlib import aclosing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import stages as stage_table
from pipeline.progress import parse as parse_progress
from remote.compat import advise, config_facts, pipeline_blockers
from remote.errors import EXIT_USAGE, JobLocked, RemoteCommandError, StageFailed, UsageError
from remote.jobs.blocks import stage_events
from remote.jobs.client import Jobs
from remote.jobs.records import RunInfo
from remote.jobs.remembered import RememberedRuns
from remote.jobs.stage_records import FACTS, facts_text
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.link.upload import box_path, upload, upload_many
from remote.spine import events as ev
from remote.spine import stage_life
from remote.spine.bus import EventBus
from remote.spine.events import Event
from remote.spine.stage_life import StageState

# Library chatter (progress bars, per-file INFO logs) would drown the stage records in the log;
# warnings and errors still come through.
QUIET_ENV = {
    "PYTHONUNBUFFERED": "1",
    "TQDM_DISABLE": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "warning",
    "LOGURU_LEVEL": "WARNING",
    "TOKENIZERS_PARALLELISM": "false",
    # The console reads the stage's error record: no second copy of it on stderr.
    "EAGLE3_STAGE_RECORDS_READ": "1",
}

_SSH_ADDRESS = ("import os;c=os.environ.get('SSH_CONNECTION','').split();"
                "print(c[2] if len(c)==4 else '')")


def local_source_root() -> Path:
    """The directory holding the `pipeline` package on this machine."""
    spec = importlib.util.find_spec("pipeline")
    if spec is None or spec.origin is None:
        raise RuntimeError("the pipeline package is not importable here")
    return Path(spec.origin).resolve().parent.parent


# The runner's job name: one pipeline at a time per workdir (the job lock).
RUN_NAME = "pipeline"


@dataclass
class RunOutcome:
    """What the box runner did: its stages as the one fold reads their events
    (remote/spine/stage_life.py), and the run as it ended."""

    run_id: str
    how: str  # started | attached | reattached
    stages: dict[str, StageState] = field(default_factory=dict)
    info: RunInfo | None = None  # the run as it ended

    @property
    def ok(self) -> bool:
        return self.info is not None and self.info.returncode == 0 and self.failed is None

    @property
    def failed(self) -> StageState | None:
        return next((o for o in self.stages.values() if o.status == stage_life.FAILED), None)

    def names(self, status: str) -> list[str]:
        return [o.name for o in self.stages.values() if o.status == status]

    def fold(self, event: Event) -> None:
        """One event of the run into its stages (the runner's own and demo-setup's left out)."""
        if event.payload.get("stage") in stage_table.names():
            stage_life.fold(self.stages, event)


class PipelineRunner:
    def __init__(self, transport: Transport, host: HostConfig, bus: EventBus,
                 *, in_place: bool | None = None) -> None:
        self.transport = transport
        self.host = host
        self.bus = bus
        self.python = host.python
        self.jobs = Jobs(transport, host.workdir, host=host.name, bus=bus, python=host.python)
        # On this machine the package runs from this checkout; elsewhere (another box, or a
        # container, whose filesystem is its own) it is uploaded.
        here = host.is_local and host.runtime == "none"
        self.in_place = here if in_place is None else in_place
        self._root: str | None = None
        self._src: str | None = None
        # The runner's extra environment (training across boxes: EAGLE3_TRAIN_NODES) and a hook
        # that sees each record's event of the followed run (remote/train_nodes.py starts the other
        # boxes' ranks from one).
        self.env: dict[str, str] = {}
        self.record_hook: Callable[[Event, str], Awaitable[None]] | None = None

    def _emit(self, kind: str, **payload: Any) -> None:
        self.bus.emit(kind, self.host.name, **payload)

    def emit_info(self, message: str) -> None:
        self._emit(ev.CONSOLE_INFO, message=message)

    async def root(self) -> str:
        if self._root is None:
            self._root = await box_path(self.transport, self.host.workdir, self.python)
        return self._root

    async def ssh_address(self) -> str:
        """The address the box's sshd was reached on ('' on a local host or behind a container)."""
        done = await self.transport.run([self.python, "-c", _SSH_ADDRESS], timeout=60)
        return done.stdout.strip() if done.returncode == 0 else ""

    async def source_dir(self) -> str:
        """Where `python -m pipeline` runs from on the box (uploaded, content-hashed)."""
        if self._src is None:
            local = local_source_root()
            if self.in_place:
                self._src = str(local)
            else:
                src = posixpath.join(await self.root(), "src")
                files = [(path, posixpath.join(src, path.relative_to(local).as_posix()))
                         for path in sorted((local / "pipeline").rglob("*.py"))]
                sent = await upload_many(self.transport, files, python=self.python,
                                         bus=self.bus, host=self.host.name)
                self._emit(ev.CONSOLE_INFO, message=f"pipeline package on the box: {src} "
                           f"({sent} file(s) sent, the rest unchanged)")
                self._src = src
        return self._src

    async def remote_config(self, local_config: Path) -> str:
        """The config path on the box: in place locally, else uploaded under <workdir>/configs
        (paths inside it are then resolved on the box: make them absolute there)."""
        if self.in_place:
            return str(local_config.resolve())
        dest = posixpath.join(await self.root(), "configs", local_config.name)
        await upload(self.transport, local_config, dest, python=self.python, bus=self.bus,
                     host=self.host.name)
        return dest

    def _argv(self, *args: str) -> list[str]:
        return [self.python, "-m", "pipeline", *args]

    async def _direct(self, *args: str, timeout: float = 120) -> tuple[int, str, str]:
        src = await self.source_dir()
        done = await self.transport.run(self._argv(*args), env={"PYTHONPATH": src},
                                        timeout=timeout)
        return done.returncode, done.stdout, done.stderr

    async def validate(self, config: str) -> dict[str, Any]:
        """The config as the box resolves it; a bad one raises UsageError (exit 2) with the
        pipeline's own one-line message (file: key: problem)."""
        rc, out, err = await self._direct("validate", "--config", config)
        if rc == EXIT_USAGE:
            raise UsageError(last_error(out, err))
        if rc != 0:
            raise RemoteCommandError(["python", "-m", "pipeline", "validate"], rc, err or out)
        try:
            data = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RemoteCommandError(["python", "-m", "pipeline", "validate"], rc,
                                     f"no JSON on stdout: {out[:200]!r}") from None
        return dict(data)

    def advise_config(self, resolved: dict[str, Any]) -> None:
        """The advisor's config-only rules (no vLLM needed), before any stage starts: an error
        finding stops the run here instead of minutes into a stage."""
        if "hf_config" not in resolved:
            return  # an older pipeline on the box
        facts = config_facts(resolved["hf_config"], resolved.get("embed_names") or [],
                             trust_remote_code=resolved.get("trust_remote_code"))
        findings = advise({"packages": resolved.get("packages") or {}}, facts)
        blockers = pipeline_blockers(findings)
        for f in findings:
            severity = f.severity if f in blockers or f.severity != "error" else "info"
            line = f"[{severity}] {f.rule}: {f.detail} -> fix ({f.fix['kind']}): {f.fix['text']}"
            if severity != f.severity:
                line += " (only speculators' own generator hits this; the pipeline does not run it)"
            kind = {"error": ev.CONSOLE_ERROR, "warning": ev.CONSOLE_WARNING}.get(
                severity, ev.CONSOLE_INFO)
            self._emit(kind, message=line, rule=f.rule)
        errors = [f.rule for f in blockers]
        if errors:
            raise StageFailed(f"the compat advisor predicts a failure ({', '.join(errors)}): "
                              "fix the config first (see above)")

    async def plan(self, config: str) -> list[dict[str, Any]]:
        rc, out, err = await self._direct("plan", "--config", config)
        if rc != 0:
            raise RemoteCommandError(["python", "-m", "pipeline", "plan"], rc, err or out)
        rows = []
        for line in out.splitlines():
            with suppress(ValueError):
                rows.append(json.loads(line))
        return rows

    def _runner_args(self, config: str | None, demo_dir: str | None, start: str | None,
                     force: bool, rerun: str | None, until: str | None = None) -> list[str]:
        args = ["run"]
        args += ["--config", config] if config else ["--demo-dir", demo_dir or ""]
        if start:
            args += ["--from", start]
        if force:
            args.append("--force")
        if rerun:
            args += ["--rerun", rerun]
        if until:
            args += ["--until", until]
        return args

    async def start(self, config: str | None = None, *, demo_dir: str | None = None,
                    start: str | None = None, force: bool = False,
                    rerun: str | None = None, until: str | None = None) -> tuple[RunInfo, str]:
        """Launch the box runner, or find the one already running (the job lock): the run and
        `started` or `attached`. Launching returns as soon as the box has it going."""
        src = await self.source_dir()
        argv = self._argv(*self._runner_args(config, demo_dir, start, force, rerun, until))
        await self._report_lost_run()
        try:
            info = await self.jobs.launch(argv, name=RUN_NAME,
                                          env={"PYTHONPATH": src, **QUIET_ENV, **self.env},
                                          cwd=src)
            how = "started"
        except JobLocked as exc:
            if not exc.run_id:
                raise
            info = await self.jobs.status(exc.run_id)
            how = "attached"
            self._emit(ev.CONSOLE_WARNING, message=(
                f"a pipeline run is already going on {self.host.name} ({info.run_id}, started "
                f"{info.started}): attached to it instead of starting another"
                + ("" if info.argv[3:] == argv[3:] else
                   f"; it runs `pipeline {' '.join(info.argv[3:])}`, not what was asked now")))
        self.announce(info, how)
        return info, how

    async def _report_lost_run(self) -> None:
        """The last box runner ended without an exit record (the box rebooted, or every process
        of the run was killed; its files kept): say so, and what it was doing, before the new
        run resumes from the manifests that completed (issue 33 item 5). Its log's last MiB
        says which stages ended and which one was cut."""
        runs = [r for r in await self.jobs.list() if r.name == RUN_NAME]
        if not runs or runs[-1].state != "lost":
            return
        lost = runs[-1]
        done = await self.transport.run(["tail", "-c", str(1 << 20), lost.log_path])
        lines, read = done.stdout.splitlines(), RunOutcome(lost.run_id, "lost")
        for event in stage_events(self.host.name, lost.run_id, RUN_NAME, lines,
                                  list(range(len(lines))), ev.utc_now()).values():
            read.fold(event)
        cut = read.names(stage_life.RUNNING)
        completed = [o.name for o in read.stages.values()
                     if o.status in (stage_life.DONE, stage_life.SKIPPED)]
        what = (f"while {', '.join(cut)} ran: its unfinished work is lost (a cut sample or "
                "checkpoint is never trusted)" if cut else "between stages")
        kept = f"; complete and kept: {', '.join(completed)}" if completed else ""
        self._emit(ev.CONSOLE_WARNING, message=(
            f"the last pipeline run {lost.run_id} on {self.host.name} was lost: it ended without "
            f"an exit record (the box rebooted, or its processes were killed) {what}{kept}; "
            "this run resumes from the last complete manifests"), run_id=lost.run_id,
            lost_stages=cut, completed=completed)

    def announce(self, info: RunInfo, how: str) -> None:
        """Say which runner this console follows, and remember it for the next start."""
        config = run_config(info.argv)
        self._emit(ev.PIPELINE_RUN, run_id=info.run_id, how=how, state=info.state,
                   config=config, started=info.started,
                   summary=f"pipeline run {info.run_id} {how} on {self.host.name} "
                   f"({info.state}): the box carries it through evaluate")
        RememberedRuns().remember(self.host, info.run_id, config=config, started=info.started)

    async def follow(self, run_id: str, *, how: str = "started") -> RunOutcome:
        """Tail the runner from the start of its log to its end; what it did, its stages folded
        from the events the tail parsed. A runner that ended without its own account (killed,
        lost with the box) leaves its unreached stages marked not run here, with why."""
        outcome = RunOutcome(run_id, how)
        async with aclosing(self.jobs.tail(run_id, offset=0)) as lines:
            async for line in lines:
                if line.event is not None:
                    outcome.fold(line.event)
                    if self.record_hook is not None:
                        await self.record_hook(line.event, run_id)
        final = outcome.info = await self.jobs.wait(run_id)
        # The runner's own account leaves no stage running, and none it was to carry (through
        # its --until) unsaid: what is left is what a runner cut short did not say.
        until = argv_value(final.argv, "--until")
        due = stage_table.through(until) if until in stage_table.names() else stage_table.names()
        why = f"the pipeline run {final.state}" + (
            f" (returncode {final.returncode})" if final.returncode is not None else "")
        said = [(ev.STAGE_END, o.name, {"ok": False, "error": f"{o.name}: {why} while it ran"})
                for o in outcome.stages.values() if o.status == stage_life.RUNNING]
        said += [(ev.STAGE_NOT_RUN, name, {"reason": why}) for name in due
                 if name not in outcome.stages]
        for kind, name, payload in said:
            words = f"failed: {payload['error']}" if payload.get("error") else f"not run: {why}"
            event = ev.Event.checked(kind, self.host.name, {
                "stage": name, "run_id": run_id, **payload, "summary": f"{name} {words}"})
            self.bus.publish(event)
            outcome.fold(event)
        return outcome

    async def show_manifests(self, config: str) -> list[dict[str, Any]]:
        """Each stage's manifest as the box has it now, as stage.manifest events: a console
        that did not watch a run shows its finished stages with their times and sizes."""
        rows = await self.plan(config)
        for row in rows:
            stage = str(row.get("stage", ""))
            facts = {k: row[k] for k in FACTS if row.get(k) is not None}
            done = bool(row.get("complete"))
            reason = str(row.get("reason", ""))
            self._emit(ev.STAGE_MANIFEST, stage=stage, complete=done, reason=reason,
                       config=config, **facts,
                       summary=(f"{stage}: done" + facts_text(facts)) if done
                       else f"{stage}: not done ({reason})")
        return rows


def argv_value(argv: list[str], flag: str) -> str:
    """The value after `flag` in a runner's argv ("" without one)."""
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else ""


def run_config(argv: list[str]) -> str:
    """The config a runner's argv names (`--config C`, or the demo's `--demo-dir D`)."""
    for flag, suffix in (("--config", ""), ("--demo-dir", "/pipeline.toml")):
        if value := argv_value(argv, flag):
            return value.rstrip("/") + suffix
    return ""


def last_error(out: str, err: str) -> str:
    """The pipeline's one-line error: its last error record, else stderr's last line."""
    for line in reversed(out.splitlines()):
        rec = parse_progress(line)
        if rec is not None and rec.get("type") == "error":
            return str(rec.get("message", "invalid config"))
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return lines[-1].removeprefix("error: ") if lines else "invalid config"
