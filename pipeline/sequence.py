"""`python -m pipeline run`: the box carries the whole pipeline, the console only watches.

One detached job on the box (the console launches it as `pipeline`, under the job lock) runs
the remaining stages in order, each as its own `python -m pipeline STAGE` child (a stage's torch
or vLLM memory is given back before the next starts, and a crash in one is that stage's failure,
not the runner's). Its stdout is the job log, so the stages' `@@eagle3` records land there as
they always did, next to the runner's own:

    skipped   a stage whose manifest matches (with the manifest's seconds, bytes, completed)
    end       ok false, for a stage that exited non-zero (its own error record is above it)
    not_run   each stage after a failure or a cancel, with why
    finished  the run's outcome: ran, skipped, failed, not_run, config, output_dir

The console that launched it may quit, be killed or lose its connection at any point: the runner
does not depend on it and goes on through evaluate. A console starting later reads the same log
from offset 0 and sees the same stages (remote/jobs/stage_records.py).

Skipping is decided just before each stage (its manifest against the inputs as they are now),
so a stage re-run upstream makes the stages after it run again. --from STAGE forces STAGE and
every later one, --force all of them, --rerun STAGE only that one (the TUI's `s`).
Exit codes: 0 done, the failed stage's code (1, or 2 for bad input), 143 when cancelled.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from pipeline import stages as stage_table
from pipeline import state_size
from pipeline.errors import PipelineError
from pipeline.progress import emit

RUNNER = "pipeline"  # the stage name of the runner's own records
EXIT_CANCELLED = 128 + signal.SIGTERM


def _stage_argv(stage: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", stage, *args]


PR_SET_PDEATHSIG = 1


def die_with(parent: int, sig: int = signal.SIGKILL, *,
             session: bool = False) -> Callable[[], None]:
    """A child's preexec_fn. Linux: the child asks the kernel for `sig` when `parent` dies, so a
    `kill -9` of the runner never leaves its stage writing on alone. The job helper's supervisor
    ends the runner's whole process group as well (remote/jobs/helper_runs.py: end_group) and is the
    main guard (it also reaches a stage's own children); this one holds where that supervisor
    is gone too (elsewhere: the supervisor alone). `session`: a session of its own first, so a
    server's workers are stopped with it as a group (pipeline.trainers.online)."""
    def arm() -> None:  # in the child, between fork and exec
        if session:
            os.setsid()
        if not sys.platform.startswith("linux"):
            return
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the request was made
            os.kill(os.getpid(), sig)

    return arm


def _child(argv: list[str]) -> int:
    """Run one stage with the runner's stdout and stderr (the job log); its exit code."""
    sys.stdout.flush()
    try:
        return subprocess.call(argv, stdin=subprocess.DEVNULL, preexec_fn=die_with(os.getpid()))
    except OSError as exc:
        emit("error", argv[3] if len(argv) > 3 else RUNNER, message=f"cannot start {argv}: {exc}")
        return 127


def _failed_rc(rc: int) -> int:
    return rc if rc in (1, 2) else 1


def run(config: str | None, *, start: str | None = None, force: bool = False,
        rerun: str | None = None, demo_dir: str | None = None, until: str | None = None) -> int:
    """Every stage in order from `config` (or the demo built in `demo_dir` first); with `until`,
    none after that one (the console's sharded extraction runs prepare first, alone)."""
    # SIGTERM (the console's cancel TERMs the whole process group): the running stage gets the
    # same signal and ends; the runner then records what did not run instead of dying silently.
    cancel = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: cancel.set())
    outcome: dict[str, Any] = {"ran": [], "skipped": [], "failed": None, "not_run": []}

    def finish(ok: bool, rc: int, **extra: Any) -> int:
        emit("finished", RUNNER, ok=ok, returncode=rc, cancelled=cancel.is_set(), **outcome,
             **extra)
        return rc

    def not_run(rest: tuple[str, ...], why: str) -> None:
        for stage in rest:
            emit("not_run", stage, reason=why)
            outcome["not_run"].append(stage)

    emit("info", RUNNER, message=f"the box carries the pipeline (runner pid {os.getpid()}): every "
         "remaining stage runs to the end whether or not a console is watching")
    if demo_dir:
        t0 = time.monotonic()
        emit("start", "demo-setup", reason="build the demo (reused when built)")
        rc = _child(_stage_argv("demo-setup", "--dir", demo_dir))
        ok = rc == 0
        emit("end", "demo-setup", ok=ok, seconds=round(time.monotonic() - t0, 3),
             **({} if ok else {"error": f"demo-setup exited {rc}", "returncode": rc}))
        if not ok:
            not_run(stage_table.names(), "the demo could not be built (demo-setup failed)")
            outcome["failed"] = "demo-setup"
            return finish(False, _failed_rc(rc))
        # as named, not resolved: a demo reached through a link keeps the paths it was run with
        config = os.path.join(os.path.abspath(os.path.expanduser(demo_dir)), "pipeline.toml")
    if not config:
        raise PipelineError("run needs --config FILE or --demo-dir DIR")

    from pipeline import config as config_mod
    from pipeline import manifest

    try:
        cfg = config_mod.load(config, check_disk=False)  # extract checks the disk itself
    except PipelineError as exc:
        emit("error", RUNNER, message=str(exc), exit_code=exc.exit_code)
        not_run(stage_table.names(), "the config did not load (error above)")
        return finish(False, exc.exit_code)
    emit("info", RUNNER, message=(
        f"pipeline config {cfg.path}: target {cfg.model_path} ({cfg.num_layers} layers, hidden "
        f"{cfg.hidden_size}), layer ids {list(cfg.all_layer_ids)}, "
        f"{state_size.bytes_per_token(cfg)} bytes/token, output {cfg.output_dir}"),
        config=str(cfg.path), output_dir=str(cfg.output_dir))
    paths = {"config": str(cfg.path), "output_dir": str(cfg.output_dir)}
    order = stage_table.names()
    first_forced = order.index(start) if start else (0 if force else len(order))
    last = order.index(until) + 1 if until else len(order)
    for i, stage in enumerate(order[:last]):
        if cancel.is_set():
            not_run(order[i:], "the run was cancelled")
            return finish(False, EXIT_CANCELLED, **paths)
        forced = i >= first_forced or stage == rerun
        if not forced:
            st = manifest.status(cfg, stage)
            if st.complete:
                emit("skipped", stage, reason=st.reason, **manifest.facts(cfg, stage))
                outcome["skipped"].append(stage)
                continue
        t0 = time.monotonic()
        rc = _child(_stage_argv(stage, "--config", str(cfg.path), *(["--force"] if forced else [])))
        if rc == 0:
            outcome["ran"].append(stage)
            continue
        outcome["failed"] = stage
        why = "cancelled" if cancel.is_set() else f"exited {rc}"
        emit("end", stage, ok=False, seconds=round(time.monotonic() - t0, 3), returncode=rc,
             error=f"{stage} {why}")
        not_run(order[i + 1:], "the run was cancelled" if cancel.is_set()
                else f"{stage} failed (exit {rc}): the runner stopped there")
        return finish(False, EXIT_CANCELLED if cancel.is_set() else _failed_rc(rc), **paths)
    return finish(True, 0, **paths)

