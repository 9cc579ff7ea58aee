"""`console run` with `[extract] hosts` in the pipeline config: prepare on the training box,
extract sharded across the boxes, gathered on the training box, then the rest of the pipeline
there (docs/pipeline.md, "Sharded extraction"; the work itself: remote/ops/sharded_extract.py).

Every box is checked before anything starts: a name console.toml does not define is exit 2, a
box that cannot be reached exit 3, each one line naming it, and no stage or shard has started.
`--reassign HOST` leaves HOST out (a box known lost) and runs its shard on another;
`--reassign-lost` does that by itself for a box down at start or lost mid-run.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from console.context import Context
from remote.link.errors import ConnectionFailed, StageFailed

if TYPE_CHECKING:
    from remote.ops.sharded_extract import Box
    from remote.pipeline_runner import PipelineRunner, RunOutcome

# A shard box's link gives up after this many reconnect attempts (the default keeps trying,
# for a laptop that sleeps): a lost box is then noticed in seconds, not never.
RECONNECT_ATTEMPTS = 3


def reassigned(args: argparse.Namespace) -> set[str]:
    return {h.strip() for item in (args.reassign or []) for h in item.split(",") if h.strip()}


def check_names(args: argparse.Namespace, hosts: list[str]) -> None:
    """Before the session opens: every shard box named in console.toml (exit 2 otherwise)."""
    from remote.link.hosts import load_config
    from remote.ops.sharded_extract import check_hosts

    config = load_config(getattr(args, "config", None))
    check_hosts(hosts, {*config.hosts, "local"}, reassigned(args))


async def _connect(ctx: Context, names: list[str], *,
                   reassign_lost: bool) -> tuple[dict[str, Box], list[str]]:
    """A link to every shard box; the boxes that cannot be reached. Without `reassign_lost`
    the first one ends the run before anything started (exit 3, one line naming it and both
    ways on); with it, each is left out as if named by --reassign, and said so."""
    from remote.link.connect import make_transport
    from remote.ops.sharded_extract import Box
    from remote.pipeline_runner import PipelineRunner

    boxes: dict[str, Box] = {}
    down: list[str] = []
    for name in names:
        host = ctx.host(name)
        t = make_transport(host, bus=ctx.bus, reconnect_attempts=RECONNECT_ATTEMPTS,
                           **ctx.ssh_kwargs()) if not host.is_local else await ctx.transport(name)
        try:
            await t.connect()
        except ConnectionFailed as exc:
            if reassign_lost:
                ctx.warning(f"extract host {name} cannot be reached ({exc}): its shard goes to "
                            "another box (--reassign-lost)", name)
                down.append(name)
                continue
            for b in boxes.values():
                await b.transport.close()
            raise ConnectionFailed(f"extract host {name} cannot be reached, nothing started: "
                                   f"{exc} (`--reassign {name}` runs its shard on another box; "
                                   "`--reassign-lost` does that for any box down)") from None
        boxes[name] = Box(name, PipelineRunner(t, host, ctx.bus))
    if not boxes:
        raise ConnectionFailed("no extract host can be reached ("
                               f"{', '.join(down)}): nothing started")
    return boxes, down


async def run_sharded(ctx: Context, args: argparse.Namespace, runner: PipelineRunner,
                      config: str, hosts: list[str]) -> RunOutcome:
    from pipeline import stages as stage_table
    from remote.ops import pipeline as pipeline_ops
    from remote.ops.sharded_extract import ShardedExtract, check_hosts, shard_plan

    reassign = reassigned(args)
    check_hosts(hosts, {*ctx.config.hosts, "local"}, reassign)
    boxes, down = await _connect(ctx, [h for h in hosts if h not in reassign],
                                 reassign_lost=args.reassign_lost)
    reassign |= set(down)
    try:
        forced = bool(args.force) or args.start in stage_table.through("extract")
        ctx.info(f"extract sharded across {', '.join(hosts)}"
                 + (f" ({', '.join(sorted(reassign))} left out)" if reassign else "")
                 + f"; gathered on {runner.host.name}", runner.host.name, hosts=hosts)
        first = await pipeline_ops.run_pipeline(
            runner, config, until="prepare",
            start="prepare" if args.force or args.start == "prepare" else None)
        if args.until == "prepare":
            return first
        plan = await shard_plan(runner, config, force=forced)
        if plan.complete:
            ctx.info(f"extract is complete on {runner.host.name} (its manifest matches): no "
                     "shard to run", runner.host.name)
        else:
            with tempfile.TemporaryDirectory(prefix="eagle3-prepared-") as tmp:
                local = Path(tmp) / "train.jsonl"
                await runner.transport.get(plan.train_jsonl, local)
                rows = [r for r in local.read_text(encoding="utf-8").splitlines() if r.strip()]
            work = ShardedExtract(runner, config, Path(args.pipeline).expanduser(), boxes,
                                  reassign=reassign, reassign_lost=args.reassign_lost,
                                  force=forced)
            outcome = await work.run(plan, rows)
            for k, why in sorted(outcome.failed.items()):
                ctx.error(why, plan.hosts[k], shard=k + 1)
            if outcome.failed:
                done = len(plan.shards) - len(outcome.failed)
                what = (f"{len(outcome.failed)} of {len(plan.shards)} shards not extracted "
                        f"({done} gathered on {runner.host.name} and kept)")
                if outcome.lost:
                    raise ConnectionFailed(f"{what}: {', '.join(outcome.lost)} lost; `console "
                                           f"run --reassign {','.join(outcome.lost)}` reruns "
                                           "their shards on the other boxes")
                which = ", ".join(f"shard {k + 1} on {h}"
                                  for k, h in sorted(outcome.failed_on.items()))
                raise StageFailed(f"{what}: {which or 'see the errors above'} failed; `console "
                                  "run` again reruns only the shards not gathered")
            ran = ", ".join(f"{k + 1} on {h}" for k, h in sorted(outcome.ran.items()))
            ctx.info(f"every shard gathered on {runner.host.name} (ran: {ran or 'none'})",
                     runner.host.name, shards={str(k + 1): h for k, h in outcome.ran.items()})
    finally:
        for b in boxes.values():
            if b.transport is not ctx.transports.get(b.name):
                await b.transport.close()
    later = stage_table.after("extract") if forced else args.start
    return await pipeline_ops.run_pipeline(runner, config, start=later, until=args.until,
                                            reach=ctx.reach)
