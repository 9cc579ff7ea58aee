"""Training across boxes (`[train] hosts = ["a", "b"]`): the train stage through torchrun's c10d
rendezvous, nnodes x nproc_per_node ranks (pipeline/ranks.py: the ranks of one box, what each
runs, a dead rank's one line), with speculators' own distributed trainer doing the work.

Who runs what (docs/pipeline.md "Training across boxes"):
- the first box: its train stage (`train_across`, called by pipeline/stages/train.py) prints a
  record with `nodes: true` (the rendezvous endpoint, the run id, a digest of the training data), then runs
  `torchrun --nnodes N --rdzv-endpoint FIRST:PORT --local-addr FIRST ... -m pipeline.ranks rank`
  and waits for it; rank 0 writes the checkpoint into this box's train work dir, and the stage
  goes on as on one box (serving checkpoint, manifest);
- every other box: `python -m pipeline train-node` (`node_main`), which the console launches as
  a detached job when it reads the `nodes` record: it checks that this box holds the same
  training data (the extract and vocab outputs, compared by their manifests' sha256), then runs
  the same torchrun with its own --local-addr.
The boxes cannot reach each other over SSH, so the console (which reaches all of them) starts
the others; the addresses come from it too, in EAGLE3_TRAIN_NODES on the first box's runner.
speculators 0.3.x cannot do this on CPU (pipeline/ranks.py `refuse_03`, one line with why).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from pipeline import stages as stage_table
from pipeline.config_types import PipelineConfig
from pipeline.errors import ConfigInvalid, PipelineError
from pipeline.manifest import read
from pipeline.progress import emit
from pipeline.ranks import collect, ranks_per_node, refuse_03, run_id, run_torchrun
from pipeline.trainers.shard_sampler import LOCAL_SHARDS

NODES_ENV = "EAGLE3_TRAIN_NODES"
NODE_DIR = ".train-node"  # a box other than the first trains here (it keeps no checkpoint)


def across(cfg: PipelineConfig) -> bool:
    """Whether the train stage spans several boxes."""
    return len(cfg.train.hosts) > 1


def data_digest(cfg: PipelineConfig) -> str:
    """What every box must hold alike: the extract and vocab outputs, as their manifests list
    them (relative path, size, sha256). Keys are not compared: they include each box's own
    resolved paths.

    train.data = local-shards: each box holds its own shard, so the files differ by design;
    what must be alike is the plan they were cut from: prepare's and vocab's outputs (token
    ids, masks, counts, the draft vocab: path, size, sha256) and the shards' ranges (extract's
    meta.json). Each box's extract stage checked its own shard against its manifest."""
    local = cfg.train.data == LOCAL_SHARDS
    rows: list[Any] = []
    for stage in (stage_table.PREPARE, stage_table.VOCAB, stage_table.EXTRACT) if local \
            else stage_table.get(stage_table.TRAIN).inputs:
        m = read(cfg, stage)
        if m is None:
            raise ConfigInvalid(str(cfg.path), f"train.hosts: this box has no complete {stage} "
                                f"under {cfg.output_dir} " + (
                                    "(train.data = \"local-shards\": the sharded run's shard job "
                                    "builds it on every box)" if local else "(every train host "
                                    "needs the same extract and vocab outputs: docs/pipeline.md)"))
        if local and stage == stage_table.EXTRACT:
            rows.append(["shards", m.get("summary", {}).get("shards")])
        else:
            rows.append([stage, sorted((o["path"], o["size"], o["sha256"])
                                       for o in m["outputs"])])
    return hashlib.sha256(json.dumps(["local-shards", rows] if local else rows).encode()
                          ).hexdigest()


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
    """The first box's side: announce the rendezvous, run rank 0 (and this box's other ranks)
    under torchrun, and return rank 0's result (with the world size it trained in)."""
    refuse_03(cfg, device)
    addresses = _addresses(cfg)
    endpoint = f"{addresses[0]}:{cfg.train.rdzv_port}"
    rdzv_id = run_id()
    nproc = ranks_per_node(cfg, device)
    emit("info", stage_table.TRAIN, nodes=True, hosts=list(cfg.train.hosts), addresses=addresses, endpoint=endpoint,
         run_id=rdzv_id, data=data_digest(cfg), device=device, nproc_per_node=nproc,
         message=f"training across {len(addresses)} boxes ({', '.join(cfg.train.hosts)}), "
         f"{nproc} rank(s) on this one: rendezvous at {endpoint}, waiting up to "
         f"{cfg.train.join_timeout} s for the others")
    failure, ranks_dir = run_torchrun(cfg, nnodes=len(cfg.train.hosts), nproc=nproc,
                                      endpoint=endpoint, local_addr=addresses[0],
                                      save_dir=save_dir, device=device, rdzv_id=rdzv_id)
    if failure or not (ranks_dir / "rank-0.json").is_file():
        raise PipelineError(
            f"training across {', '.join(cfg.train.hosts)} failed: "
            f"{failure or 'rank 0 left no result'} (a box that did not join {endpoint} within "
            f"{cfg.train.join_timeout} s, or a rank's error: each other box's log is its "
            "`train-node` job)")
    return collect(ranks_dir)


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
        what, fix = (("prepare/vocab outputs or shard plan", "the same dataset, tokenizer and "
                      "config on every box (train.data = \"local-shards\", docs/pipeline.md)")
                     if cfg.train.data == LOCAL_SHARDS else
                     ("extract/vocab outputs", "copy them from it (docs/pipeline.md)"))
        raise ConfigInvalid(str(cfg.path), f"train.hosts: this box's {what} under "
                            f"{cfg.output_dir} differ from the first box's (digest "
                            f"{mine[:12]} vs {args.data[:12]}): {fix}")
    if args.check:
        _reach(args.endpoint, deadline=time.monotonic() + args.wait)
        emit("info", stage_table.TRAIN, message=f"training data matches the first box ({mine[:12]}); "
             f"the rendezvous at {args.endpoint} answers")
        return 0
    failure, _ = run_torchrun(cfg, nnodes=len(cfg.train.hosts), nproc=ranks_per_node(cfg, device),
                              endpoint=args.endpoint, local_addr=args.local_addr,
                              save_dir=cfg.output_dir / NODE_DIR / "checkpoints", device=device,
                              rdzv_id=args.run_id)
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
