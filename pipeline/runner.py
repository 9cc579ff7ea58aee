"""Runs one stage with the rules every stage shares: skip when the manifest matches, otherwise
invalidate the manifest, work in a temporary directory, move outputs into place, manifest last.

A resumable stage (extract) writes straight into its final directory, one atomically renamed
file per sample, guarded by a key file: a re-run with the same key keeps finished samples and
does the rest; a different key wipes the directory first.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import manifest
from pipeline import stages as stage_table
from pipeline.config_types import PipelineConfig
from pipeline.diskfull import disk_full_message, is_disk_full
from pipeline.errors import PipelineError
from pipeline.progress import emit
from pipeline.tracebacks import print_for_log


@dataclass
class StageContext:
    cfg: PipelineConfig
    stage: str
    key: str
    workdir: Path  # where the stage writes; becomes output_dir/<stage> on success
    force: bool = False  # a resumable stage starts over instead of keeping finished work

    def input_dir(self, stage: str) -> Path:
        return manifest.stage_dir(self.cfg, stage)


def run_stage(cfg: PipelineConfig, stage: str, *, force: bool = False) -> bool:
    """Run (or skip) one stage. True if it ran, False if skipped; raises on failure."""
    st = manifest.status(cfg, stage)
    if st.complete and not force:
        emit("skipped", stage, reason=st.reason, **manifest.facts(cfg, stage))
        return False
    key = manifest.stage_key(cfg, stage)
    if key is None:
        missing = [u for u in stage_table.get(stage).inputs if manifest.read(cfg, u) is None]
        raise PipelineError(f"{stage}: input stage(s) {', '.join(missing)} not complete: "
                            f"run them first")
    # The `run` of the module the stage's row names, imported now: each pulls torch or
    # transformers, which `plan` and the console must not pay for.
    fn: Callable[[StageContext], tuple[list[Path], dict[str, Any]]] = importlib.import_module(
        stage_table.get(stage).entry).run
    # evaluate through a server (evaluate.served_url) is stdlib-only by design: it must run
    # where torch is missing or the target cannot be loaded, so it never imports torch.
    served = stage == stage_table.EVALUATE and bool(cfg.evaluate.served_url)
    if cfg.cpu_threads and not served:
        import torch  # every other stage past this point needs it anyway

        # Tiny models on a few shared cores run faster on one thread than on several.
        torch.set_num_threads(cfg.cpu_threads)
    # The command as the box ran it: with the box runner carrying the stages, this record is
    # where a report finds the command that produced each stage's outputs.
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    lock_stage(cfg, stage)  # before anything of the stage's is touched
    emit("start", stage, reason=("forced" if force and st.complete else st.reason),
         argv=[sys.executable, "-m", "pipeline", *sys.argv[1:]])
    t0 = time.monotonic()
    manifest.invalidate(cfg, stage)
    final = manifest.stage_dir(cfg, stage)
    if stage_table.get(stage).resumable:
        work = final
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = cfg.output_dir / f".{stage}.partial"
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
    ctx = StageContext(cfg=cfg, stage=stage, key=key, workdir=work, force=force)
    try:
        outputs, summary = fn(ctx)
        if work != final:
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
            outputs = [final / p.relative_to(work) for p in outputs]
        seconds = time.monotonic() - t0
        m = manifest.write(cfg, stage, outputs, key=key, summary=summary, seconds=seconds)
    except Exception as exc:
        _discard_partial(work, final)
        if is_disk_full(exc, cfg.output_dir):  # one line naming the disk, not a traceback
            raise PipelineError(disk_full_message(stage, cfg.output_dir)) from None
        if isinstance(exc, PipelineError):
            raise
        print_for_log(exc)  # the whole traceback stays in the job log; the console folds it
        raise PipelineError(f"{stage} failed: {type(exc).__name__}: {exc}") from exc
    emit("end", stage, ok=True, seconds=round(seconds, 3),
         outputs=[o["path"] for o in m["outputs"]][:20], summary=summary)
    return True


# The stage locks this process holds (released when it exits, however it exits).
_HELD: dict[str, int] = {}


def lock_stage(cfg: PipelineConfig, stage: str) -> None:
    """One writer of a stage's outputs at a time: an exclusive flock on `.<stage>.lock` beside
    its work directory, held until this process ends (the kernel drops it on any exit, a
    SIGKILL included, so a dead writer never blocks a rerun). A second writer (a stage left
    running by a killed runner, a second console's run) is refused with one line naming the
    holder: two writers renamed the same `.evaluate.partial` and one failed (issue 41)."""
    path = cfg.output_dir / f".{stage}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
        os.close(fd)
        pid, started = [*holder, "?", "?"][:2]
        raise PipelineError(f"{stage}: another writer holds {path} (pid {pid}, started "
                            f"{started}); not started beside it: wait for it to end, or end "
                            "it") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
              .encode(), 0)
    _HELD[stage] = fd


def _discard_partial(work: Path, final: Path) -> None:
    """What a failed stage leaves is never trusted (no manifest is written), and on a full disk
    it holds the space a re-run needs: a non-resumable stage's temporary directory goes, a
    resumable one keeps its finished samples and loses only a sample cut mid-write."""
    if work != final:
        shutil.rmtree(work, ignore_errors=True)
        return
    for part in work.rglob("*.part"):
        with suppress(OSError):
            if part.is_dir():
                shutil.rmtree(part)
            else:
                part.unlink()


def plan(cfg: PipelineConfig, *, start: str | None = None,
         force: bool = False) -> list[dict[str, Any]]:
    """Which stages would run. --from STAGE forces STAGE and everything after it."""
    rows = []
    order = stage_table.names()
    forced_from = order.index(start) if start else (0 if force else len(order))
    for i, stage in enumerate(order):
        st = manifest.status(cfg, stage)
        rows.append({"stage": stage, "complete": st.complete, "reason": st.reason,
                     "force": i >= forced_from, **manifest.facts(cfg, stage)})
    return rows
