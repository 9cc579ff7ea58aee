"""Training across boxes: the train stage through torchrun's c10d rendezvous, one process per box
(`[train] hosts = ["a", "b"]`), with speculators' own distributed trainer doing the work (0.9's
`speculators train`: DistributedDataParallel over its distributed batch sampler; gloo on CPU,
the accelerator's backend, nccl, on GPUs). Nothing here reduces a gradient itself.

Who runs what (docs/pipeline.md "Training across boxes"):
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

speculators 0.3.x cannot do this on CPU (measured; the evidence is in docs/pipeline.md): its
Trainer's distributed branch calls `m.to_empty(device="cuda")` after fully_shard
(speculators/train/trainer.py:104) and its own setup raises "No accelerator found"
(speculators/train/utils.py:33). That path stays on one box, with one line saying why.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.errors import ConfigInvalid, PipelineError
from pipeline.manifest import read, stage_dir
from pipeline.progress import emit

NODES_ENV = "EAGLE3_TRAIN_NODES"
NODE_DIR = ".train-node"  # a box other than the first trains here (it keeps no checkpoint)
REFUSED_03 = (
    "train.hosts: speculators {version} (the 0.3 path) cannot train across boxes on CPU: its "
    "Trainer's distributed branch moves the sharded layers to CUDA "
    "(speculators/train/trainer.py:104 `m.to_empty(device=\"cuda\")`: \"Found no NVIDIA driver\") "
    "and its own setup raises \"No accelerator found\" (speculators/train/utils.py:33); train on "
    "one box (remove train.hosts) or with speculators 0.9 (docs/pipeline.md)")


def across(cfg: PipelineConfig) -> bool:
    """Whether the train stage spans several boxes."""
    return len(cfg.train.hosts) > 1


def refuse_03(cfg: PipelineConfig) -> None:
    from pipeline.formats import installed_speculators, speculators_path

    if speculators_path(cfg) == "0.3":
        raise ConfigInvalid(str(cfg.path), REFUSED_03.format(version=installed_speculators()))


def data_digest(cfg: PipelineConfig) -> str:
    """What every box must hold alike: the extract and vocab outputs, as their manifests list
    them (relative path, size, sha256). Keys are not compared: they include each box's own
    resolved paths."""
    from pipeline import stages as stage_table

    rows: list[Any] = []
    for stage in stage_table.get("train").inputs:
        m = read(cfg, stage)
        if m is None:
            raise ConfigInvalid(str(cfg.path), f"train.hosts: this box has no complete {stage} "
                                f"under {cfg.output_dir} (every train host needs the same "
                                "extract and vocab outputs: docs/pipeline.md)")
        rows.append([stage, sorted((o["path"], o["size"], o["sha256"]) for o in m["outputs"])])
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def torchrun_argv(cfg: PipelineConfig, *, endpoint: str, local_addr: str, run_id: str,
                  save_dir: Path, result: Path, device: str) -> list[str]:
    """torchrun for one box: one process (one per GPU on cuda), c10d rendezvous at `endpoint`
    (the first box's address; c10d hosts its store on the box whose --local-addr matches it)."""
    return [sys.executable, "-m", "torch.distributed.run",
            "--nnodes", str(len(cfg.train.hosts)),
            "--nproc-per-node", "gpu" if device == "cuda" else "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
            "--rdzv-conf", f"join_timeout={cfg.train.join_timeout}",
            "--local-addr", local_addr, "--max-restarts", "0",
            "-m", "pipeline.nodes", "rank", "--config", str(cfg.path),
            "--save-dir", str(save_dir), "--result", str(result), "--device", device]


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


def train_across(cfg: PipelineConfig, save_dir: Path, device: str) -> dict[str, Any]:
    """The first box's side: announce the rendezvous, run rank 0 (and its local peers) under
    torchrun, and return rank 0's result (with the world size it trained in)."""
    refuse_03(cfg)
    addresses = _addresses(cfg)
    endpoint = f"{addresses[0]}:{cfg.train.rdzv_port}"
    run_id = f"eagle3-train-{os.getpid()}-{int(time.time())}"
    result = save_dir.parent / "rank0.json"
    emit("info", "train", nodes=True, hosts=list(cfg.train.hosts), addresses=addresses, endpoint=endpoint,
         run_id=run_id, data=data_digest(cfg), device=device,
         message=f"training across {len(addresses)} boxes ({', '.join(cfg.train.hosts)}): "
         f"rendezvous at {endpoint}, waiting up to {cfg.train.join_timeout} s for the others")
    argv = torchrun_argv(cfg, endpoint=endpoint, local_addr=addresses[0], run_id=run_id,
                         save_dir=save_dir, result=result, device=device)
    sys.stdout.flush()
    rc = subprocess.call(argv, stdin=subprocess.DEVNULL)
    if rc != 0 or not result.is_file():
        raise PipelineError(
            f"training across {', '.join(cfg.train.hosts)} failed (torchrun exit {rc}): a box "
            f"that did not join {endpoint} within {cfg.train.join_timeout} s, or a rank's error "
            "above (each other box's log is its `train-node` job)")
    out: dict[str, Any] = json.loads(result.read_text())
    result.unlink()
    return out


def rank_main(args: argparse.Namespace) -> int:
    """One rank under torchrun (every box): speculators' trainer in its distributed mode."""
    from pipeline import config as config_mod
    from pipeline import trainers

    cfg = config_mod.load(args.config, check_disk=False)
    if cfg.cpu_threads:
        import torch

        torch.set_num_threads(cfg.cpu_threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    emit("info", "train", message=f"rank {rank} of {world} (torchrun, c10d) starting",
         rank=rank, world_size=world)
    save = Path(args.save_dir)
    res = trainers.for_config(cfg).train(cfg, stage_dir(cfg, "extract"), stage_dir(cfg, "vocab"),
                                         save, args.device)
    emit("info", "train", rank_done=True, rank=rank, world_size=world, steps=res.get("steps"),
         message=f"rank {rank} of {world}: {res.get('steps')} steps")
    if rank == 0:
        Path(args.result).write_text(json.dumps({**res, "world_size": world}))
    return 0


def node_main(args: argparse.Namespace) -> int:
    """A box other than the first (`python -m pipeline train-node`): the same data as the first
    box, then its torchrun; --check stops after the data check (the console runs it first)."""
    from pipeline import config as config_mod
    from pipeline.devices import pick_device

    cfg = config_mod.load(args.config, check_disk=False)
    refuse_03(cfg)
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
    device = pick_device(cfg.train.device)
    work = cfg.output_dir / NODE_DIR
    work.mkdir(parents=True, exist_ok=True)
    argv = torchrun_argv(cfg, endpoint=args.endpoint, local_addr=args.local_addr,
                         run_id=args.run_id, save_dir=work / "checkpoints",
                         result=work / "result.json", device=device)
    sys.stdout.flush()
    rc = subprocess.call(argv, stdin=subprocess.DEVNULL)
    if rc != 0:
        raise PipelineError(f"this box's rank(s) failed (torchrun exit {rc}): see above")
    return 0


def _reach(endpoint: str, *, deadline: float) -> None:
    """The first box's rendezvous store answers from here (it opens a moment after the `nodes`
    record): a firewall or a wrong address is one line now, not a join timeout later."""
    import socket

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
    p.add_argument("--result", required=True)
    p.add_argument("--device", default="cpu")
    try:
        return rank_main(p.parse_args(argv))
    except PipelineError as exc:
        emit("error", "train", message=str(exc), exit_code=exc.exit_code)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
