"""The EAGLE-3 pipeline on a box: upload it, validate the config, run each stage as a detached
job and turn its progress lines into stage events.

Each stage is one detached run (`pipeline-<stage>`), so a stage outlives the console and the
connection like any job; its log carries the stage's `@@eagle3 {...}` records (pipeline/
progress.py), which become stage.start / stage.progress / stage.end / stage.skipped events, and
console.info / console.error for its info and error records, published by the job tail itself
(remote/jobs/stage_records.py) right after the record's job.line event. Skipping is the stage's own
decision (its manifest), so a second run of the same config skips every stage; leading stages
that `plan` reports complete are skipped here without launching anything.
"""

from __future__ import annotations

import importlib.util
import json
import posixpath
import time
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.progress import parse as parse_progress
from remote.compat import advise, config_facts, pipeline_blockers, shorten
from remote.jobs.client import Jobs
from remote.link.errors import RemoteCommandError, StageFailed, UsageError
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.link.upload import upload, upload_many
from remote.spine import events as ev
from remote.spine.bus import EventBus

STAGES = ("prepare", "extract", "vocab", "train", "evaluate")

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

_RESOLVE = "import os,sys;print(os.path.abspath(os.path.expanduser(sys.argv[1])))"


def local_source_root() -> Path:
    """The directory holding the `pipeline` package on this machine."""
    spec = importlib.util.find_spec("pipeline")
    if spec is None or spec.origin is None:
        raise RuntimeError("the pipeline package is not importable here")
    return Path(spec.origin).resolve().parent.parent


@dataclass
class StageOutcome:
    stage: str
    state: str  # "ran" | "skipped" | "failed"
    seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    ended: bool = False  # the stage reported its own end (stage.end already emitted)


class PipelineRunner:
    def __init__(self, transport: Transport, host: HostConfig, bus: EventBus,
                 *, in_place: bool | None = None) -> None:
        self.transport = transport
        self.host = host
        self.bus = bus
        self.python = host.python
        self.jobs = Jobs(transport, host.workdir, host=host.name, bus=bus, python=host.python)
        # On the built-in local host the package runs from this checkout; elsewhere uploaded.
        self.in_place = host.is_local if in_place is None else in_place
        self._root: str | None = None
        self._src: str | None = None

    def _emit(self, kind: str, **payload: Any) -> None:
        self.bus.emit(kind, self.host.name, **payload)

    async def root(self) -> str:
        if self._root is None:
            done = await self.transport.run([self.python, "-c", _RESOLVE, self.host.workdir],
                                            timeout=60)
            if done.returncode != 0 or not done.stdout.strip().startswith("/"):
                raise RemoteCommandError([self.python, "-c", "<resolve workdir>"],
                                         done.returncode, done.stderr or done.stdout)
            self._root = done.stdout.strip()
        return self._root

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
        if rc == 2:
            raise UsageError(_last_error(out, err))
        if rc != 0:
            raise RemoteCommandError(["python", "-m", "pipeline", "validate"], rc, err or out)
        try:
            data = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RemoteCommandError(["python", "-m", "pipeline", "validate"], rc,
                                     f"no JSON on stdout: {out[:200]!r}") from None
        return dict(data)

    def _advise_config(self, resolved: dict[str, Any]) -> None:
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
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        return rows

    async def run_job(self, name: str, stage: str, args: list[str]) -> StageOutcome:
        """Launch one detached stage, tail it to the end, and report what it did."""
        src = await self.source_dir()
        info = await self.jobs.launch(self._argv(*args), name=f"pipeline-{name}",
                                      env={"PYTHONPATH": src, **QUIET_ENV}, cwd=src)
        outcome = StageOutcome(stage=stage, state="failed")
        t0 = time.monotonic()
        async with aclosing(self.jobs.tail(info.run_id)) as lines:
            async for line in lines:
                rec = parse_progress(line.text)
                if rec is not None:
                    self._on_record(rec, info.run_id, outcome)
        final = await self.jobs.wait(info.run_id)
        if final.returncode == 0 and outcome.state != "skipped":
            outcome.state = "ran"
            if not outcome.ended:  # a step with no end record of its own (demo-setup)
                self._emit(ev.STAGE_END, stage=stage, ok=True,
                           seconds=round(time.monotonic() - t0, 3), run_id=info.run_id,
                           summary=f"{stage} done in {time.monotonic() - t0:.1f} s")
        elif final.returncode != 0:
            outcome.state = "failed"
            shown = bool(outcome.error)  # printed once already, as console.error
            outcome.error = outcome.error or f"{stage} exited {final.returncode} ({final.state})"
            summary = (f"{stage} failed (error above)" if shown
                       else f"{stage} failed: {shorten(outcome.error)}")
            self._emit(ev.STAGE_END, stage=stage, ok=False,
                       seconds=round(time.monotonic() - t0, 3), run_id=info.run_id,
                       error=outcome.error, summary=summary)
        outcome.seconds = time.monotonic() - t0
        return outcome

    def _on_record(self, rec: dict[str, Any], run_id: str, outcome: StageOutcome) -> None:
        """What a record means for the outcome. Its event was published by the tail itself
        (remote/jobs/stage_records.py), so a reattached tail shows the same progress."""
        kind = rec.get("type")
        if kind == "end":
            outcome.ended = True
            outcome.summary = dict(rec.get("summary") or {})
        elif kind == "skipped":
            outcome.state = "skipped"
        elif kind == "error":
            outcome.error = str(rec.get("message", ""))

    async def demo_setup(self) -> str:
        """Build the tiny demo on the box (once; reused afterwards); its config path."""
        demo_dir = posixpath.join(await self.root(), "demo")
        out = await self.run_job("demo-setup", "demo-setup",
                                 ["demo-setup", "--dir", demo_dir])
        if out.state == "failed":
            raise StageFailed(f"demo setup failed: {out.error}")
        return posixpath.join(demo_dir, "pipeline.toml")

    async def run(self, config: str, *, start: str | None = None,
                  force: bool = False) -> list[StageOutcome]:
        """Every stage in order; stops at the first failure (raised as StageFailed)."""
        resolved = await self.validate(config)
        self._emit(ev.CONSOLE_INFO, message=(
            f"pipeline config {config}: target {resolved['model']} ({resolved['num_layers']} "
            f"layers, hidden {resolved['hidden_size']}), layer ids {resolved['layer_ids']}, "
            f"{resolved['bytes_per_token']} bytes/token, output {resolved['output_dir']}"))
        self._advise_config(resolved)
        first_forced = STAGES.index(start) if start else (0 if force else len(STAGES))
        plan = {row["stage"]: row for row in await self.plan(config)}
        outcomes: list[StageOutcome] = []
        launched = False
        for i, stage in enumerate(STAGES):
            forced = i >= first_forced
            row = plan.get(stage, {})
            if not launched and not forced and row.get("complete"):
                reason = str(row.get("reason", "manifest matches"))
                self._emit(ev.STAGE_SKIPPED, stage=stage, reason=reason,
                           summary=f"{stage} skipped: {reason}")
                outcomes.append(StageOutcome(stage=stage, state="skipped"))
                continue
            launched = True
            args = [stage, "--config", config, *(["--force"] if forced else [])]
            out = await self.run_job(stage, stage, args)
            outcomes.append(out)
            if out.state == "failed":
                raise StageFailed(f"stage {stage} failed (the error is above; its full text "
                                  f"is in the session file and `console jobs` log)")
        return outcomes


def _last_error(out: str, err: str) -> str:
    for line in reversed(out.splitlines()):
        rec = parse_progress(line)
        if rec is not None and rec.get("type") == "error":
            return str(rec.get("message", "invalid config"))
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return lines[-1].removeprefix("error: ") if lines else "invalid config"
