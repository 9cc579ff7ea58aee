"""Resumable training through speculators' own checkpoints, for both adapters.

- Saves: the trainer's save call runs with its checkpointer pointed at a staging directory and
  the result is published whole (pipeline/checkpoints.py: marker last, rename into place), so a
  process killed mid-save leaves the previous checkpoint as it was.
- Resume: the newest checkpoint that checks (pipeline/checkpoints.py `newest`) is the one the
  trainer finds; every other is removed first. Under torchrun every rank must load the same one
  (each loads the optimizer state itself, 0.9's DDP path), so rank 0 chooses it and tells the
  others, which link it into their own save directory (hard links: the same files, no space) or,
  on a box that does not see rank 0's disk, receive its bytes from rank 0.
- The steps: each published checkpoint's marker keeps the optimizer steps done (`global_step`)
  and the steps of an epoch, so a rerun says `resumed from step S of T` before it trains.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import checkpoints
from pipeline.progress import emit
from pipeline.stages import TRAIN


@dataclass
class Resumed:
    """What this rank resumed from (None fields: a fresh start)."""

    step: int = 0  # optimizer steps done before this run
    total: int = 0  # steps of the whole training (epochs x steps per epoch), 0 when unknown
    epoch: int | None = None
    local_step: int = 0
    received: list[Path] = field(default_factory=list)  # copies a rank > 0 holds, not its own

    @property
    def resumed(self) -> bool:
        return self.epoch is not None


def choose(save: Path, *, rank: int = 0) -> tuple[Path, dict[str, Any]] | None:
    """Rank 0 (or the one process): the newest complete checkpoint, every other removed, each
    removal said in one info line."""
    return checkpoints.newest(save, lambda m: emit("info", TRAIN, message=m)
                              if rank == 0 else None)


def announce(found: tuple[Path, dict[str, Any]] | None, epochs: int) -> Resumed:
    """The `resumed from step S of T` line (rank 0 only prints it) and what it says."""
    if found is None:
        return Resumed()
    d, marker = found
    per_epoch = int(marker.get("steps_per_epoch") or 0)
    got = Resumed(step=int(marker.get("global_step") or 0), total=per_epoch * epochs,
                  epoch=int(marker.get("epoch", d.name)),
                  local_step=int(marker.get("local_step") or 0))
    where = (f"epoch {got.epoch}, step {got.local_step} of {per_epoch}" if got.local_step
             else f"the end of epoch {got.epoch}")
    emit("info", TRAIN, resumed_from=got.step, total=got.total, checkpoint=str(d),
         message=f"resumed from step {got.step} of {got.total or '?'} (checkpoint {d.name}: "
         f"{where}, sealed {_sealed_at(d)})")
    return got


def sync_ranks(save: Path, epochs: int) -> Resumed:
    """Under torchrun, after the process group is up and before the trainer looks at `save`:
    rank 0 chooses, every other rank gets that same checkpoint into its own `save`."""
    import torch.distributed as dist

    rank = dist.get_rank()
    found = choose(save, rank=rank) if rank == 0 else None
    desc: list[Any] = [None]
    if found is not None:
        desc = [{"path": str(found[0]), "name": found[0].name, "marker": found[1]}]
    dist.broadcast_object_list(desc, src=0)
    d = desc[0]
    if rank != 0:  # nothing of an earlier run of its own: only what rank 0 chose
        shutil.rmtree(save, ignore_errors=True)
    if d is None:
        return Resumed()
    src, target = Path(d["path"]), save / d["name"]
    seen = rank == 0 or (src.is_dir() and checkpoints.check(src)[0] == d["marker"])
    if rank != 0 and seen:  # the same disk (this box, or shared storage): linked, no copy
        save.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, target, copy_function=os.link)
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, seen)
    if not all(every):  # a box that does not see rank 0's disk: the files' bytes from rank 0
        blob: list[Any] = [None]
        if rank == 0:
            blob = [{name: (src / name).read_bytes()
                     for name in [*d["marker"]["files"], checkpoints.MARKER]}]
        dist.broadcast_object_list(blob, src=0)
        if not seen:
            for name, data in blob[0].items():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                (target / name).write_bytes(data)
    if rank == 0:
        return announce(found, epochs)
    marker = d["marker"]
    return Resumed(step=int(marker.get("global_step") or 0),
                   total=int(marker.get("steps_per_epoch") or 0) * epochs,
                   epoch=int(marker.get("epoch", d["name"])),
                   local_step=int(marker.get("local_step") or 0), received=[target])


STALL_ENV = "EAGLE3_CHECKPOINT_STALL_AT"  # a test's hook (below)


def _stall(info: dict[str, Any]) -> None:
    """For the test that kills a process while it writes a checkpoint: with STALL_ENV set to a
    step, the save of that step says so and waits between its files and its seal."""
    if os.environ.get(STALL_ENV) == str(info.get("global_step")):
        emit("info", TRAIN, stalled_at=info["global_step"],
             message=f"checkpoint at step {info['global_step']} held unsealed ({STALL_ENV})")
        time.sleep(600)


class Saves:
    """The trainer's checkpoint saves made whole (staged, sealed, renamed into place) on rank 0,
    and the time of the last one (for the time-based saves).

    With `background` (speculators 0.9's adapter) the seal (every file fsynced, the marker,
    the renames: the disk's time, not the CPU's) runs in a thread while training goes on: in
    the trainer's own order every rank waits at a barrier until rank 0's save returns, so a
    seal done in line held every rank for the disk at each save (docs/measurements.md,
    issue 51). Nothing changes for a reader: the checkpoint directory appears only sealed,
    and its line (`checkpoint at step S`) is said once it has. `wait()` joins it: before the
    next save (the staging directory is reused), before the trainer writes into the
    published directory (its validation metrics) and before training is reported done;
    `training()` joins it on the trainer's failure too."""

    def __init__(self, epochs: int, *, background: bool = False) -> None:
        self.epochs = epochs
        self.last = time.monotonic()
        self.interrupted = False  # speculators' graceful-shutdown save was asked (SIGTERM)
        self.background = background
        self._sealing: threading.Thread | None = None
        # Each finished seal: its step's info, and the marker written or the error it raised
        self._sealed: list[tuple[dict[str, Any], dict[str, Any] | BaseException]] = []

    def around(self, checkpointer: Any, rank: int, epoch: int, save: Callable[[], None],
               info: dict[str, Any]) -> None:
        """Run `save` (the trainer's own, writing under checkpointer.path/<epoch>) staged."""
        self.wait()
        real = Path(checkpointer.path)
        staging = real / checkpoints.WRITING
        if rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            checkpointer.path = staging
        try:
            save()
        finally:
            checkpointer.path = real
        self.last = time.monotonic()
        if rank != 0:
            return
        written = staging / str(epoch)
        _stall(info)
        if not (written / "model.safetensors").is_file():
            shutil.rmtree(staging, ignore_errors=True)
            return
        if not self.background:
            self._seal(written, real / str(epoch), staging, info)
            self.wait()
            return
        # Not a daemon: a run that fails meanwhile still ends its seal before the process exits
        self._sealing = threading.Thread(target=self._seal, name="checkpoint-seal",
                                         args=(written, real / str(epoch), staging, info))
        self._sealing.start()

    def _seal(self, written: Path, final: Path, staging: Path, info: dict[str, Any]) -> None:
        try:
            self._sealed.append((info, checkpoints.publish(written, final, info)))
        except BaseException as exc:  # raised where it is waited for
            self._sealed.append((info, exc))
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def wait(self, *, block: bool = True,
             unsealed: Callable[[dict[str, Any], BaseException], None] | None = None) -> None:
        """The save in flight sealed and its line said (its error raised here, or handed to
        `unsealed` with the save's info); without `block`, only when it has already finished."""
        t = self._sealing
        if t is not None:
            if not block and t.is_alive():
                return
            t.join()
            self._sealing = None
        while self._sealed:
            info, m = self._sealed.pop(0)
            if not isinstance(m, BaseException):
                self._say(m)
            elif unsealed is None:
                raise m
            else:
                unsealed(info, m)

    @contextlib.contextmanager
    def training(self) -> Iterator[None]:
        """The trainer's run (pipeline/trainers/cli.py `train_with`). Returning: `wait()` (a
        seal's error raised). Raising: the seal in flight is joined all the same and its line
        said (left alone, the thread, not a daemon, would finish but say nothing), a seal that
        failed is said in an info line of its own (the stage's one error line stays the
        trainer's), and the trainer's error is the one raised."""
        try:
            yield
        except BaseException:
            self.wait(unsealed=_say_unsealed)
            raise
        self.wait()

    def _say(self, m: dict[str, Any]) -> None:
        per = m["steps_per_epoch"]
        emit("info", TRAIN, checkpoint_step=m["global_step"], message=(
            f"checkpoint at step {m['global_step']} of {per * self.epochs} (epoch "
            f"{m['epoch']}" + (f", step {m['local_step']} of {per})" if m["local_step"]
                               else ", its end)")))


def _say_unsealed(info: dict[str, Any], exc: BaseException) -> None:
    emit("info", TRAIN, seal_failed=info.get("global_step"), message=(
        f"the checkpoint at step {info.get('global_step', '?')} was not sealed "
        f"({type(exc).__name__}: {exc}): a rerun resumes from the one before it"))


def _sealed_at(d: Path) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((d / checkpoints.MARKER).stat().st_mtime))
    except OSError:
        return "?"


def summary(got: Resumed, done: int) -> dict[str, Any]:
    """The manifest's word on resuming: the steps run before it (by the earlier runs) and after
    it (by this one); a fresh run resumed from nothing."""
    if not got.resumed:
        return {"resumed_from": None}
    return {"resumed_from": got.step, "steps_before_resume": got.step,
            "steps_after_resume": max(0, done - got.step)}


TIME_SYNC_STEPS = 8  # under torchrun, rank 0's clock is asked every this many steps


def patch_09(cfg: Any, save_dir: Path, handler: Any
             ) -> tuple[Callable[[], None], Saves, list[Resumed]]:
    """Resume and whole saves in speculators 0.9's own trainer (this module):
    the checkpoint chosen (and shared between ranks) right after its distributed setup, the
    step frequency set once its loader is built, each save staged and sealed, the time-based
    saves from its per-step callback. Returns (undo, saves, [what was resumed])."""
    import speculators.train.cli as cli
    from speculators.train import trainer as trainer_mod

    t = cfg.train
    got: list[Resumed] = []
    original_setup = cli.maybe_setup_distributed

    def setup_then_choose(*args: Any, **kwargs: Any) -> None:
        original_setup(*args, **kwargs)
        if "LOCAL_RANK" in os.environ:
            got.append(sync_ranks(save_dir, t.epochs))
        else:
            got.append(announce(choose(save_dir), t.epochs))
        if got[-1].resumed:
            handler.resumed(got[-1])

    Trainer = trainer_mod.Trainer
    init, save, epoch_fn = Trainer.__init__, Trainer.maybe_save_checkpoint, Trainer.train_epoch
    best = Trainer.maybe_update_best

    saves = Saves(t.epochs, background=True)

    def init_with_freq(self: Any, model: Any, config: Any, train_loader: Any,
                       *args: Any, **kwargs: Any) -> None:
        n = len(train_loader)
        if t.checkpoint_every_steps and n:  # its checkpoint_freq is in epochs
            config = config._replace(checkpoint_freq=min(1.0, t.checkpoint_every_steps / n))
        init(self, model, config, train_loader, *args, **kwargs)

    def whole_save(self: Any, epoch: Any, local_step: int = 0) -> None:
        if not isinstance(epoch, int):  # its graceful-shutdown save ("interrupted"): this
            saves.interrupted = True    # run stops; the last sealed checkpoint is the resume
            return
        n = len(self.train_loader)
        info = {"epoch": epoch, "local_step": local_step, "global_step": self.global_step,
                "steps_per_epoch": n, "epochs": t.epochs}
        saves.around(self.checkpointer, self.rank, epoch,
                     lambda: save(self, epoch, local_step=local_step), info)

    def epoch_with_timer(self: Any, epoch: int, *, step_callback: Any = None) -> None:
        if not t.checkpoint_every_minutes:
            return epoch_fn(self, epoch, step_callback=step_callback)
        import torch

        n = len(self.train_loader)
        local = [int(getattr(self, "_resume_local_step", 0))
                 if epoch == getattr(self, "current_epoch", epoch) else 0]
        every = (max(1, round(n * self.config.checkpoint_freq))
                 if self.config.checkpoint_freq < 1 else 0)

        def step_done() -> None:
            if step_callback is not None:
                step_callback()
            local[0] += 1
            due = time.monotonic() - saves.last >= t.checkpoint_every_minutes * 60
            if self.is_distributed:  # every rank saves together: rank 0's clock decides
                if local[0] % TIME_SYNC_STEPS:
                    return
                import torch.distributed as dist

                flag = torch.tensor([1 if due else 0],
                                    device=next(self.model.parameters()).device)
                dist.broadcast(flag, src=0)
                due = bool(flag.item())
            if due and local[0] < n and not (every and local[0] % every == 0):
                self.maybe_save_checkpoint(epoch, local_step=local[0])

        return epoch_fn(self, epoch, step_callback=step_done)

    def best_once_sealed(self: Any, *args: Any, **kwargs: Any) -> Any:
        saves.wait()  # it writes the epoch's validation metrics into the published directory
        return best(self, *args, **kwargs)

    cli.maybe_setup_distributed = setup_then_choose  # type: ignore[attr-defined]
    Trainer.maybe_update_best = best_once_sealed  # type: ignore[method-assign]
    Trainer.__init__ = init_with_freq  # type: ignore[method-assign]
    Trainer.maybe_save_checkpoint = whole_save  # type: ignore[method-assign]
    Trainer.train_epoch = epoch_with_timer  # type: ignore[method-assign]

    def undo() -> None:
        cli.maybe_setup_distributed = original_setup  # type: ignore[attr-defined]
        Trainer.__init__ = init  # type: ignore[method-assign]
        Trainer.maybe_update_best = best  # type: ignore[method-assign]
        Trainer.maybe_save_checkpoint = save  # type: ignore[method-assign]
        Trainer.train_epoch = epoch_fn  # type: ignore[method-assign]

    return undo, saves, got
