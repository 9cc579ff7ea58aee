"""Ranks under torchrun: several on one box (`[train] nproc_per_node`), and what every rank runs,
on one box or across boxes (pipeline/nodes.py). speculators' own distributed trainer does the
work (0.9's `speculators train`: DistributedDataParallel over its distributed batch sampler;
0.3's library Trainer: FSDP, CUDA only; gloo on CPU, nccl on GPUs); nothing here reduces a
gradient itself.

Ranks per box (`ranks_per_node`): `train.nproc_per_node` when set, else one per GPU torch sees on
the box, 1 on CPU. One box with N > 1 ranks (`train_local`) is the call training across boxes
makes with --nnodes 1, its rendezvous on a free loopback port (torchrun's port 0 hangs).

Every rank (`rank_main`, `python -m pipeline.ranks rank` under torchrun) trains into its own save
directory (rank 0: the stage's; speculators saves on rank 0 alone, so the others stay empty) and
leaves `rank-R.json` (its result) or `rank-R.error` (its error, one line) in the ranks
directory. A rank that dies (an exception, or a signal: the OOM killer) fails the stage in one
line naming the rank and its error: its own `rank-R.error`, else torchrun's failure summary (its
stderr, relayed to the log) naming the first rank that failed and its exit code or signal;
torchrun (--max-restarts 0) stops the other ranks.

speculators 0.3.x cannot train with several ranks on CPU (measured; the evidence is in
docs/pipeline.md): its Trainer's distributed branch calls `m.to_empty(device="cuda")` after
fully_shard (speculators/train/trainer.py:104) and its own setup raises "No accelerator found"
(speculators/train/utils.py:33). There one line says why, and training stays one process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any

from pipeline.config_types import PipelineConfig
from pipeline.errors import ConfigInvalid, PipelineError
from pipeline.manifest import stage_dir
from pipeline.progress import emit
from pipeline.stages import EXTRACT, TRAIN, VOCAB

RANKS_DIR = "ranks"  # each rank's result (rank-R.json) or error (rank-R.error)
REFUSED_03 = (
    "{key}: speculators {version} (the 0.3 path) cannot train with several ranks on CPU: its "
    "Trainer's distributed branch moves the sharded layers to CUDA "
    "(speculators/train/trainer.py:104 `m.to_empty(device=\"cuda\")`: \"Found no NVIDIA driver\") "
    "and its own setup raises \"No accelerator found\" (speculators/train/utils.py:33); {fix} "
    "or train with speculators 0.9 (docs/pipeline.md)")
_FIX = {"train.hosts": "train on one box (remove train.hosts)",
        "train.nproc_per_node": "train with one rank (train.nproc_per_node = 1)"}


def slots(device: str) -> tuple[int, str]:
    """How many ranks this box can give one each of, and of what: its GPUs on CUDA, else the
    CPU cores this process may run on."""
    if device == "cuda":
        import torch

        return torch.cuda.device_count(), "GPU"
    try:
        return len(os.sched_getaffinity(0)), "CPU core"
    except (AttributeError, OSError):
        return os.cpu_count() or 1, "CPU core"


def ranks_per_node(cfg: PipelineConfig, device: str) -> int:
    """torchrun processes on this box: train.nproc_per_node, else one per GPU, 1 on CPU.

    A count above the box's GPUs (CPU cores on CPU) is refused in one line before torchrun
    starts: `nproc_per_node = 10000` was handed to it (issue 48 row 9)."""
    if cfg.train.nproc_per_node:
        n = cfg.train.nproc_per_node
        have, what = slots(device)
        if n > have:
            raise ConfigInvalid(str(cfg.path), (
                f"train.nproc_per_node: {n} ranks, but this box has {have} {what}"
                f"{'' if have == 1 else 's'} ({device}): at most one rank per {what}; set it "
                f"to {have} or fewer (0: one per GPU, 1 on CPU)"))
        return n
    return max(1, slots(device)[0]) if device == "cuda" else 1


def refuse_03(cfg: PipelineConfig, device: str, key: str = "train.hosts") -> None:
    from pipeline.formats import installed, speculators_path

    if speculators_path(cfg) == "0.3" and device == "cpu":
        raise ConfigInvalid(str(cfg.path), REFUSED_03.format(
            key=key, version=installed(), fix=_FIX[key]))


def torchrun_argv(cfg: PipelineConfig, *, nnodes: int, nproc: int, endpoint: str,
                  local_addr: str | None, run_id: str, save_dir: Path, ranks_dir: Path,
                  device: str) -> list[str]:
    """torchrun for one box: `nproc` processes, c10d rendezvous at `endpoint` (the first box's
    address; c10d hosts its store on the box whose --local-addr matches it). --max-restarts 0:
    a rank that fails ends the run (torchrun stops the others) instead of restarting it."""
    argv = [sys.executable, "-m", "torch.distributed.run",
            "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
            "--rdzv-conf", f"join_timeout={cfg.train.join_timeout}", "--max-restarts", "0"]
    if local_addr:
        argv += ["--local-addr", local_addr]
    return [*argv, "-m", "pipeline.ranks", "rank", "--config", str(cfg.path),
            "--save-dir", str(save_dir), "--ranks-dir", str(ranks_dir), "--device", device]


def free_port(addr: str = "127.0.0.1") -> int:
    """A port free now on `addr` (torchrun's own port 0 hangs its rendezvous)."""
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def train_local(cfg: PipelineConfig, save_dir: Path, device: str, nproc: int) -> dict[str, Any]:
    """Several ranks on this box: torchrun --nnodes 1, its rendezvous on a free loopback port;
    rank 0's result with every rank's share."""
    refuse_03(cfg, device, "train.nproc_per_node")
    endpoint = f"127.0.0.1:{free_port()}"
    backend = "nccl" if device == "cuda" else "gloo"
    emit("info", TRAIN, ranks=nproc, world_size=nproc, message=f"training with {nproc} ranks "
         f"on this box (torchrun, {backend}; train.nproc_per_node "
         f"{cfg.train.nproc_per_node or 'auto'})")
    failure, ranks_dir = run_torchrun(cfg, nnodes=1, nproc=nproc, endpoint=endpoint,
                                      local_addr=None, save_dir=save_dir, device=device,
                                      world=nproc)
    if failure:
        raise PipelineError(f"training with {nproc} ranks failed: {failure}")
    return collect(ranks_dir)


def run_id() -> str:
    """The rendezvous id of a run started here."""
    return f"eagle3-train-{os.getpid()}-{int(time.time())}"


def collect(ranks_dir: Path) -> dict[str, Any]:
    """Rank 0's result, with this box's ranks' shares (`ranks`: rank, steps, files it wrote
    under its save dir); the directory is removed (it is no output of the stage)."""
    results = sorted((json.loads(p.read_text()) for p in ranks_dir.glob("rank-*.json")),
                     key=lambda r: int(r["rank"]))
    if not results or results[0]["rank"] != 0:
        raise PipelineError(f"torchrun ended well but rank 0 left no result in {ranks_dir}")
    out: dict[str, Any] = dict(results[0])
    out.pop("rank", None)
    out["ranks"] = [{"rank": r["rank"], "steps": r.get("steps"), "wrote": r.get("wrote"),
                     "resumed_from": r.get("resumed_from"),
                     **({"samples": r["samples"]} if "samples" in r else {})}
                    for r in results]
    shutil.rmtree(ranks_dir)
    return out


_ROOT = re.compile(r"Root Cause")
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:.*?\)\s*\(?(SIG[A-Z0-9]+))?")


def run_torchrun(cfg: PipelineConfig, *, nnodes: int, nproc: int, endpoint: str,
                 local_addr: str | None, save_dir: Path, device: str, world: int | None = None,
                 rdzv_id: str | None = None) -> tuple[str, Path]:
    """Run this box's torchrun (torchrun_argv) with a fresh ranks directory beside `save_dir`
    (stdout to ours: the ranks' records reach the log), its stderr relayed line by line and
    read for its failure summary. ('' when it succeeded, else one line: the first rank that
    failed and its error; the ranks directory)."""
    ranks_dir = save_dir.parent / RANKS_DIR
    if ranks_dir.exists():
        shutil.rmtree(ranks_dir)
    ranks_dir.mkdir(parents=True)
    argv = torchrun_argv(cfg, nnodes=nnodes, nproc=nproc, endpoint=endpoint,
                         local_addr=local_addr, run_id=rdzv_id or run_id(), save_dir=save_dir,
                         ranks_dir=ranks_dir, device=device)
    sys.stdout.flush()
    tail: deque[str] = deque(maxlen=400)
    # The ranks' stdout comes through this process too, line by line: a rank killed in the
    # middle of a line (SIGKILL, or torchrun's SIGKILL after its grace) leaves it unended, and
    # this stage's own error record written after it would be glued to it, lost to every
    # reader of the log (issue 51: "the stage exited 1 but emitted no error record").
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None and proc.stdout is not None

    readers = [threading.Thread(target=relay_lines, args=(proc.stdout, sys.stdout.buffer, None),
                                daemon=True),
               threading.Thread(target=relay_lines, args=(proc.stderr, sys.stderr.buffer, tail),
                                daemon=True)]
    for r in readers:
        r.start()
    rc = proc.wait()
    for r in readers:  # every line the ranks wrote is out before the stage's own records
        r.join(timeout=30)
    return ("" if rc == 0 else rank_failure(list(tail), ranks_dir, world, rc)), ranks_dir


def relay_lines(src: Any, dst: Any, tail: deque[str] | None) -> None:
    """Copy `src` to `dst` a line at a time, each line ended (an unended last line, a process
    killed mid-write, gets its newline), kept in `tail` when given."""
    for line in src:
        if tail is not None:
            tail.append(line.decode("utf-8", "replace"))
        dst.write(line if line.endswith(b"\n") else line + b"\n")
        dst.flush()


def rank_failure(stderr: list[str], ranks_dir: Path, world: int | None, rc: int) -> str:
    """One line for a failed torchrun: the first failed rank (torchrun's "Root Cause" block, else
    the oldest rank-R.error) and its error (its own message, else its exit code or signal)."""
    errors = {int(p.name[5:-6]): p for p in ranks_dir.glob("rank-*.error")}
    # Every failure torchrun lists (its "Failures:" then its "Root Cause" block): rank, exit
    # code, signal. Its root cause is the smallest timestamp, in whole seconds: a rank that died
    # by a signal and the rank whose collective then failed ("Connection closed by peer") can
    # share a second, and the tie goes to dict order. A rank killed from outside (any signal
    # but torchrun's own SIGTERM/SIGINT stop) is the cause whenever there is one.
    listed: list[tuple[int, str | None, str | None, bool]] = []
    in_root = False
    for line in stderr:
        if _ROOT.search(line):
            in_root = True
        elif line.strip().startswith("Failures:"):
            in_root = False
        elif m := _RANK.match(line):
            listed.append((int(m.group(1)), None, None, in_root))
        elif (m := _EXIT.match(line)) and listed:
            r, _c, _s, root = listed[-1]
            listed[-1] = (r, m.group(1), m.group(2), root)
    outside = [f for f in listed if f[1] is not None and int(f[1]) < 0
               and (f[2] or _signal(f[1])) not in ("SIGTERM", "SIGINT")]
    roots = [f for f in listed if f[3]]
    pick = outside[0] if outside else (roots[-1] if roots else None)
    rank, code, signame = (pick[0], pick[1], pick[2]) if pick else (None, None, None)
    if rank is None and errors:
        rank = min(errors, key=lambda r: errors[r].stat().st_mtime)
    of = f" of {world}" if world else ""
    if rank is None:
        return f"torchrun exit {rc}, no rank named (its output above)"
    # Killed from outside: the signal; stopped by torchrun: its own error first, if it left one.
    sig = (signame or _signal(code)) if code is not None and int(code) < 0 else None
    if sig and (sig not in ("SIGTERM", "SIGINT") or rank not in errors):
        what = f"killed by {sig}"
    elif rank in errors:
        what = errors[rank].read_text(errors="replace").strip()
    elif code is not None:
        what = f"exit code {code}"
    else:
        what = "no error recorded on this box (its own box's log says why)"
    return f"rank {rank}{of} died: {what}; torchrun stopped the other ranks"


def _signal(code: str) -> str:
    try:
        return signal.Signals(-int(code)).name
    except ValueError:
        return f"signal {-int(code)}"


def rank_main(args: argparse.Namespace) -> int:
    """One rank under torchrun (every box): speculators' trainer in its distributed mode. Rank 0
    trains into --save-dir; any other rank gets a directory of its own under --ranks-dir, so
    what it wrote (nothing: speculators saves on rank 0 alone) is seen, not merged."""
    from pipeline import config as config_mod
    from pipeline import progress, trainers

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ranks_dir = Path(args.ranks_dir)
    progress.for_rank(rank, world)
    try:
        cfg = config_mod.load(args.config, check_disk=False)
        if cfg.cpu_threads:
            import torch

            torch.set_num_threads(cfg.cpu_threads)
        emit("info", TRAIN, message=f"rank {rank} of {world} (torchrun, c10d) starting",
             rank=rank, world_size=world, pid=os.getpid())
        save = Path(args.save_dir) if rank == 0 else ranks_dir / f"rank-{rank}-checkpoints"
        res = trainers.for_config(cfg).train(cfg, stage_dir(cfg, EXTRACT),
                                             stage_dir(cfg, VOCAB), save, args.device)
    except Exception as exc:  # any rank's error is the stage's one line
        traceback.print_exc()
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
        (ranks_dir / f"rank-{rank}.error").write_text(text[:500] + "\n")
        return 1
    wrote = sum(1 for p in save.rglob("*") if p.is_file()) if save.exists() else 0
    read = res.get("samples")  # train.data = local-shards: the samples this rank trained on
    said = "; ".join(f"epoch {e}: samples " + ", ".join(f"{a}..{b}" for a, b in runs)
                     for e, runs in (read or {}).items())
    back = res.get("resumed_from")  # every rank resumed from rank 0's one checkpoint
    emit("info", TRAIN, rank_done=True, rank=rank, world_size=world, steps=res.get("steps"),
         wrote=wrote, resumed_from=back, **({"samples": read} if read is not None else {}),
         message=f"rank {rank} of {world}: {res.get('steps')} steps"
         + (f", resumed from step {back}" if back is not None else "")
         + (f" ({said})" if said else ""))
    (ranks_dir / f"rank-{rank}.json").write_text(json.dumps(
        {**res, "world_size": world, "rank": rank, "wrote": wrote}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.ranks")
    p.add_argument("command", choices=["rank"])
    p.add_argument("--config", required=True)
    p.add_argument("--save-dir", required=True)
    p.add_argument("--ranks-dir", required=True)
    p.add_argument("--device", default="cpu")
    return rank_main(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
