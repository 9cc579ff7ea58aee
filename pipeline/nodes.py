"""The train stage under torchrun: several ranks on one box (`[train] nproc_per_node`), and
across boxes (`[train] hosts = ["a", "b"]`) through torchrun's c10d rendezvous, nnodes x
nproc_per_node ranks, with speculators' own distributed trainer doing the work (0.9's
`speculators train`: DistributedDataParallel over its distributed batch sampler; 0.3's library
Trainer: FSDP, CUDA only; gloo on CPU, the accelerator's backend, nccl, on GPUs). Nothing here
reduces a gradient itself.

Ranks per box (`ranks_per_node`): `train.nproc_per_node` when set, else one per GPU torch sees on
the box, 1 on CPU (several CPU ranks share the same cores: worth it only where torch's own
threads do not already use them, docs/measurements.md). One box with N > 1 ranks is the same
torchrun call as across boxes with --nnodes 1 (`train_local`), its rendezvous on a free loopback
port.

Who runs what across boxes (docs/pipeline.md "Training across boxes"):
- the first box: its train stage (`train_across`, called by pipeline/stages/train.py) prints a
  record with `nodes: true` (the rendezvous endpoint, the run id, a digest of the training data), then runs
  `torchrun --nnodes N --rdzv-endpoint FIRST:PORT --local-addr FIRST ... -m pipeline.nodes rank`
  and waits for it; rank 0 writes the checkpoint into this box's train work dir, and the stage
  goes on as on one box (serving checkpoint, manifest);
- every other box: `python -m pipeline train-node` (`node_main`), which the console launches as
  a detached job when it reads the `nodes` record: it checks that this box holds the same
  training data (the extract and vocab outputs, compared by their manifests' sha256), then runs
  the same torchrun with its own --local-addr.
The boxes cannot reach each other over SSH, so the console (which reaches all of them) starts
the others; the addresses come from it too, in EAGLE3_TRAIN_NODES on the first box's runner.

A rank that dies (an exception, or a signal: the OOM killer) fails the stage in one line naming
the rank and its error: each rank writes its error to `rank-R.error` in the ranks directory, and
torchrun's own failure summary (on its stderr, relayed to the log) names the first rank that
failed and its exit code or signal; torchrun (--max-restarts 0) stops the other ranks.

speculators 0.3.x cannot train with several ranks on CPU (measured; the evidence is in
docs/pipeline.md): its Trainer's distributed branch calls `m.to_empty(device="cuda")` after
fully_shard (speculators/train/trainer.py:104) and its own setup raises "No accelerator found"
(speculators/train/utils.py:33). There one line says why, and training stays one process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.errors import ConfigInvalid, PipelineError
from pipeline.manifest import read, stage_dir
from pipeline.progress import emit

NODES_ENV = "EAGLE3_TRAIN_NODES"
NODE_DIR = ".train-node"  # a box other than the first trains here (it keeps no checkpoint)
RANKS_DIR = "ranks"  # each rank's result (rank-R.json) or error (rank-R.error)
REFUSED_03 = (
    "{key}: speculators {version} (the 0.3 path) cannot train with several ranks on CPU: its "
    "Trainer's distributed branch moves the sharded layers to CUDA "
    "(speculators/train/trainer.py:104 `m.to_empty(device=\"cuda\")`: \"Found no NVIDIA driver\") "
    "and its own setup raises \"No accelerator found\" (speculators/train/utils.py:33); {fix} "
    "or train with speculators 0.9 (docs/pipeline.md)")
_FIX = {"train.hosts": "train on one box (remove train.hosts)",
        "train.nproc_per_node": "train with one rank (train.nproc_per_node = 1)"}


def across(cfg: PipelineConfig) -> bool:
    """Whether the train stage spans several boxes."""
    return len(cfg.train.hosts) > 1


def ranks_per_node(cfg: PipelineConfig, device: str) -> int:
    """torchrun processes on this box: train.nproc_per_node, else one per GPU, 1 on CPU."""
    if cfg.train.nproc_per_node:
        return cfg.train.nproc_per_node
    if device == "cuda":
        import torch

        return max(1, torch.cuda.device_count())
    return 1


def refuse_03(cfg: PipelineConfig, device: str, key: str = "train.hosts") -> None:
    from pipeline.formats import installed_speculators, speculators_path

    if speculators_path(cfg) == "0.3" and device == "cpu":
        raise ConfigInvalid(str(cfg.path), REFUSED_03.format(
            key=key, version=installed_speculators(), fix=_FIX[key]))


def data_digest(cfg: PipelineConfig) -> str:
    """What every box must hold alike: the extract and vocab outputs, as their manifests list
    them (relative path, size, sha256). Keys are not compared: they include each box's own
    resolved paths."""
    rows: list[Any] = []
    for stage in ("extract", "vocab"):
        m = read(cfg, stage)
        if m is None:
            raise ConfigInvalid(str(cfg.path), f"train.hosts: this box has no complete {stage} "
                                f"under {cfg.output_dir} (every train host needs the same "
                                "extract and vocab outputs: docs/pipeline.md)")
        rows.append([stage, sorted((o["path"], o["size"], o["sha256"]) for o in m["outputs"])])
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


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
    return [*argv, "-m", "pipeline.nodes", "rank", "--config", str(cfg.path),
            "--save-dir", str(save_dir), "--ranks-dir", str(ranks_dir), "--device", device]


def _addresses(cfg: PipelineConfig) -> list[str]:
    if cfg.train.addresses:
        return list(cfg.train.addresses)
    raw = os.environ.get(NODES_ENV, "")
    try:
        addrs = json.loads(raw)["addresses"] if raw else None
    except (ValueError, KeyError, TypeError):
        addrs = None
    if not isinstance(addrs, list) or len(addrs) != len(cfg.train.hosts):
        raise ConfigInvalid(str(cfg.path), f"train.hosts {list(cfg.train.hosts)}: no addresses "
                            f"for them ({NODES_ENV} unset: start the run with `console run`, "
                            "which resolves the hosts, or set train.addresses)")
    return [str(a) for a in addrs]


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
    emit("info", "train", ranks=nproc, world_size=nproc, message=f"training with {nproc} ranks "
         f"on this box (torchrun, {backend}; train.nproc_per_node "
         f"{cfg.train.nproc_per_node or 'auto'})")
    ranks_dir = _fresh_ranks_dir(save_dir)
    argv = torchrun_argv(cfg, nnodes=1, nproc=nproc, endpoint=endpoint, local_addr=None,
                         run_id=f"eagle3-train-{os.getpid()}-{int(time.time())}",
                         save_dir=save_dir, ranks_dir=ranks_dir, device=device)
    failure = run_torchrun(argv, ranks_dir, nproc)
    if failure:
        raise PipelineError(f"training with {nproc} ranks failed: {failure}")
    return collect(ranks_dir)


def train_across(cfg: PipelineConfig, save_dir: Path, device: str) -> dict[str, Any]:
    """The first box's side: announce the rendezvous, run rank 0 (and its local peers) under
    torchrun, and return rank 0's result (with the world size it trained in)."""
    refuse_03(cfg, device)
    addresses = _addresses(cfg)
    endpoint = f"{addresses[0]}:{cfg.train.rdzv_port}"
    run_id = f"eagle3-train-{os.getpid()}-{int(time.time())}"
    nproc = ranks_per_node(cfg, device)
    emit("info", "train", nodes=True, hosts=list(cfg.train.hosts), addresses=addresses, endpoint=endpoint,
         run_id=run_id, data=data_digest(cfg), device=device, nproc_per_node=nproc,
         message=f"training across {len(addresses)} boxes ({', '.join(cfg.train.hosts)}), "
         f"{nproc} rank(s) on this one: rendezvous at {endpoint}, waiting up to "
         f"{cfg.train.join_timeout} s for the others")
    ranks_dir = _fresh_ranks_dir(save_dir)
    argv = torchrun_argv(cfg, nnodes=len(cfg.train.hosts), nproc=nproc, endpoint=endpoint,
                         local_addr=addresses[0], run_id=run_id, save_dir=save_dir,
                         ranks_dir=ranks_dir, device=device)
    failure = run_torchrun(argv, ranks_dir, None)
    if failure or not (ranks_dir / "rank-0.json").is_file():
        raise PipelineError(
            f"training across {', '.join(cfg.train.hosts)} failed: "
            f"{failure or 'rank 0 left no result'} (a box that did not join {endpoint} within "
            f"{cfg.train.join_timeout} s, or a rank's error: each other box's log is its "
            "`train-node` job)")
    return collect(ranks_dir)


def _fresh_ranks_dir(save_dir: Path) -> Path:
    ranks_dir = save_dir.parent / RANKS_DIR
    if ranks_dir.exists():
        import shutil

        shutil.rmtree(ranks_dir)
    ranks_dir.mkdir(parents=True)
    return ranks_dir


def collect(ranks_dir: Path) -> dict[str, Any]:
    """Rank 0's result, with this box's ranks' shares (`ranks`: rank, steps, files it wrote
    under its save dir); the directory is removed (it is no output of the stage)."""
    import shutil

    results = sorted((json.loads(p.read_text()) for p in ranks_dir.glob("rank-*.json")),
                     key=lambda r: int(r["rank"]))
    out: dict[str, Any] = dict(results[0])
    out.pop("rank", None)
    out["ranks"] = [{"rank": r["rank"], "steps": r.get("steps"), "wrote": r.get("wrote")}
                    for r in results]
    shutil.rmtree(ranks_dir)
    return out


_ROOT = re.compile(r"Root Cause")
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:.*?\)\s*\(?(SIG[A-Z0-9]+))?")


def run_torchrun(argv: list[str], ranks_dir: Path, world: int | None) -> str:
    """Run torchrun (stdout to ours: the ranks' records reach the log), its stderr relayed line
    by line and read for its failure summary. '' when it succeeded, else one line: the first
    rank that failed and its error."""
    sys.stdout.flush()
    tail: deque[str] = deque(maxlen=400)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            errors="replace")
    assert proc.stderr is not None

    def relay() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line)
            sys.stderr.write(line)
        sys.stderr.flush()

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    rc = proc.wait()
    reader.join(timeout=30)
    if rc == 0:
        return ""
    return rank_failure(list(tail), ranks_dir, world, rc)


def rank_failure(stderr: list[str], ranks_dir: Path, world: int | None, rc: int) -> str:
    """One line for a failed torchrun: the first failed rank (torchrun's "Root Cause" block, else
    the oldest rank-R.error) and its error (its own message, else its exit code or signal)."""
    errors = {int(p.name[5:-6]): p for p in ranks_dir.glob("rank-*.error")}
    rank: int | None = None
    code: str | None = None
    signame: str | None = None
    in_root = False
    for line in stderr:
        if _ROOT.search(line):
            in_root, rank, code, signame = True, None, None, None
        elif in_root and (m := _RANK.match(line)):
            rank = int(m.group(1))
        elif in_root and (m := _EXIT.match(line)):
            code, signame = m.group(1), m.group(2)
    if rank is None and errors:
        rank = min(errors, key=lambda r: errors[r].stat().st_mtime)
    of = f" of {world}" if world else ""
    if rank is None:
        return f"torchrun exit {rc}, no rank named (its output above)"
    if rank in errors:
        what = errors[rank].read_text(errors="replace").strip()
    elif code is not None and int(code) < 0:
        what = f"killed by {signame or _signal(code)}"
    elif code is not None:
        what = f"exit code {code}"
    else:
        what = "no error recorded on this box (its own box's log says why)"
    return f"rank {rank}{of} died: {what}; torchrun stopped the other ranks"


def _signal(code: str) -> str:
    import signal

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
        emit("info", "train", message=f"rank {rank} of {world} (torchrun, c10d) starting",
             rank=rank, world_size=world, pid=os.getpid())
        save = Path(args.save_dir) if rank == 0 else ranks_dir / f"rank-{rank}-checkpoints"
        res = trainers.for_config(cfg).train(cfg, stage_dir(cfg, "extract"),
                                             stage_dir(cfg, "vocab"), save, args.device)
    except Exception as exc:  # any rank's error is the stage's one line
        traceback.print_exc()
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
        (ranks_dir / f"rank-{rank}.error").write_text(text[:500] + "\n")
        return 1
    wrote = sum(1 for p in save.rglob("*") if p.is_file()) if save.exists() else 0
    emit("info", "train", rank_done=True, rank=rank, world_size=world, steps=res.get("steps"),
         wrote=wrote, message=f"rank {rank} of {world}: {res.get('steps')} steps")
    (ranks_dir / f"rank-{rank}.json").write_text(json.dumps(
        {**res, "world_size": world, "rank": rank, "wrote": wrote}))
    return 0


def node_main(args: argparse.Namespace) -> int:
    """A box other than the first (`python -m pipeline train-node`): the same data as the first
    box, then its torchrun; --check stops after the data check (the console runs it first)."""
    from pipeline import config as config_mod
    from pipeline.devices import pick_device

    cfg = config_mod.load(args.config, check_disk=False)
    device = pick_device(cfg.train.device)
    refuse_03(cfg, device)
    mine = data_digest(cfg)
    if mine != args.data:
        raise ConfigInvalid(str(cfg.path), f"train.hosts: this box's extract/vocab outputs "
                            f"under {cfg.output_dir} differ from the first box's (digest "
                            f"{mine[:12]} vs {args.data[:12]}): copy them from it (docs/pipeline.md)")
    if args.check:
        _reach(args.endpoint, deadline=time.monotonic() + args.wait)
        emit("info", "train", message=f"training data matches the first box ({mine[:12]}); "
             f"the rendezvous at {args.endpoint} answers")
        return 0
    work = cfg.output_dir / NODE_DIR
    ranks_dir = work / RANKS_DIR
    if ranks_dir.exists():
        import shutil

        shutil.rmtree(ranks_dir)
    ranks_dir.mkdir(parents=True)
    argv = torchrun_argv(cfg, nnodes=len(cfg.train.hosts), nproc=ranks_per_node(cfg, device),
                         endpoint=args.endpoint, local_addr=args.local_addr, run_id=args.run_id,
                         save_dir=work / "checkpoints", ranks_dir=ranks_dir, device=device)
    failure = run_torchrun(argv, ranks_dir, None)
    if failure:
        raise PipelineError(f"this box's ranks failed: {failure}")
    return 0


def _reach(endpoint: str, *, deadline: float) -> None:
    """The first box's rendezvous store answers from here (it opens a moment after the `nodes`
    record): a firewall or a wrong address is one line now, not a join timeout later."""
    host, _, port = endpoint.rpartition(":")
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise PipelineError(f"the rendezvous at {endpoint} does not answer from this "
                                    f"box ({exc}): is the first box's train stage running, and "
                                    "is the port open between the boxes?") from None
            time.sleep(0.5)


def node_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline train-node")
    p.add_argument("--config", required=True)
    p.add_argument("--endpoint", required=True, help="the first box's ADDRESS:PORT")
    p.add_argument("--local-addr", required=True, help="this box's address")
    p.add_argument("--run-id", required=True)
    p.add_argument("--data", required=True, help="the first box's training data digest")
    p.add_argument("--check", action="store_true",
                   help="check the data and that the rendezvous answers, start nothing")
    p.add_argument("--wait", type=float, default=30.0, help="--check: seconds to wait for it")
    return p


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.nodes")
    p.add_argument("command", choices=["rank"])
    p.add_argument("--config", required=True)
    p.add_argument("--save-dir", required=True)
    p.add_argument("--ranks-dir", required=True)
    p.add_argument("--device", default="cpu")
    return rank_main(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
