"""`console run` with `[extract] hosts` in the pipeline config: prepare on the training box,
extract sharded across the boxes, gathered on the training box, then the rest of the pipeline
there (docs/pipeline.md, "Sharded extraction"; the work itself: remote/ops/sharded_extract.py).

Every box is checked before anything starts: a name console.toml does not define is exit 2, a
box that cannot be reached exit 3, each one line naming it, and no stage or shard has started.
`--reassign HOST` leaves HOST out (a box known lost) and runs its shard on another;
`--reassign-lost` does that by itself for a box down at start or lost mid-run.

No hidden state crosses the console unless asked. The route of each box is decided before
anything starts: a box that shares the training box's output storage writes its shard there
(remote/ops/shard_route.py); else, when the training box reaches it (a probe of the copy
itself), its shard is copied box to box (remote/ops/shard_copy.py); else it is one line and
exit 2, unless `--relay-through-console`, which prints the bytes and an estimated time from the
measured links first. The counts end the sharded part (`relayed through the console: N B`,
and `copied box to box: N B` when a box copied).

With `[train] data = "local-shards"` (train.hosts = extract.hosts) there is no route at all:
each box extracts its shard into its own output_dir and builds its own extract and vocab
there (`shard-extract --local`), and training across the boxes reads each shard where it is.
"""

from __future__ import annotations

import argparse
import posixpath
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.context import Context
from pipeline.trainers.shard_sampler import LOCAL_SHARDS
from remote.errors import ConnectionFailed, StageFailed

if TYPE_CHECKING:
    from remote.ops.sharded_extract import Box, Plan
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
        host = ctx.config.host(name)
        # One connection per host: the training box is reached through the command's own link.
        if host.is_local or name in ctx.transports:
            t = await ctx.transport(name)
        else:
            t = make_transport(host, bus=ctx.bus, reconnect_attempts=RECONNECT_ATTEMPTS,
                               **ctx.ssh_kwargs())
        try:
            await t.connect()
        except ConnectionFailed as exc:
            if reassign_lost:
                ctx.warning(f"extract host {name} cannot be reached ({exc}): its shard goes to "
                            "another box (--reassign-lost)", name)
                down.append(name)
                continue
            for b in boxes.values():
                if b.transport is not ctx.transports.get(b.name):
                    await b.transport.close()
            raise ConnectionFailed(f"extract host {name} cannot be reached, nothing started: "
                                   f"{exc} (`--reassign {name}` runs its shard on another box; "
                                   "`--reassign-lost` does that for any box down)") from None
        boxes[name] = Box(name, PipelineRunner(t, host, ctx.bus))
    if not boxes:
        raise ConnectionFailed("no extract host can be reached ("
                               f"{', '.join(down)}): nothing started")
    return boxes, down


async def _sharing(runner: PipelineRunner, boxes: dict[str, Box], names: list[str],
                   output_dir: str) -> set[str]:
    """Of `names`, the boxes that see a fresh marker written under the training box's
    output_dir: the same storage (remote/ops/shard_route.py; a path alone cannot tell)."""
    from remote.ops import shard_route

    path, token = await shard_route.write_marker(runner.transport, output_dir)
    try:
        return {name for name in names
                if await shard_route.sees_marker(boxes[name].transport, path, token)}
    finally:
        await shard_route.remove_marker(runner.transport, path)


async def _routes(ctx: Context, runner: PipelineRunner, boxes: dict[str, Box],
                  output_dir: str, resolved: dict[str, Any], *,
                  relay: bool) -> tuple[set[str], dict[str, str]]:
    """Each box's route, before anything starts: the boxes that see the training box's output
    storage (it among them); then, of the others, those the training box reaches for a
    box-to-box copy (name -> address). Any box left, without `relay`, ends the run here: one
    line, nothing started."""
    from remote.ops import shard_copy, shard_route

    shared = {runner.host.name} | await _sharing(
        runner, boxes, [n for n in boxes if n != runner.host.name], output_dir)
    for name in sorted(shared - {runner.host.name}):
        ctx.info(f"{name} shares {runner.host.name}'s output storage ({output_dir}): its shard "
                 "is written there, nothing through the console", name)
    port = int(resolved.get("extract_copy_port") or 0)
    direct: dict[str, str] = {}
    unreachable: dict[str, str] = {}
    for name in [n for n in boxes if n not in shared]:
        box = boxes[name].runner
        address = (shard_copy.configured_address(name, resolved)
                   or await box.ssh_address())
        if not address:
            unreachable[name] = ("its address is unknown (no SSH_CONNECTION there): set "
                                 "extract.addresses")
            continue
        why = await shard_copy.probe(box, runner, address, port)
        if why:
            unreachable[name] = why
            continue
        direct[name] = address
        ctx.info(f"{name} does not share {runner.host.name}'s output storage; "
                 f"{runner.host.name} reaches it at {address}: its shard is copied box to box, "
                 "nothing through the console", name, address=address)
    if unreachable and not relay:
        raise shard_route.refuse_relay(runner.host.name, output_dir, list(unreachable),
                                       unreachable)
    for name, why in unreachable.items():
        ctx.warning(f"{name} does not share {runner.host.name}'s output storage and "
                    f"{runner.host.name} cannot reach it for a box-to-box copy ({why}): its "
                    "shard is relayed through the console (--relay-through-console)", name)
    return shared, direct


async def _announce_relay(ctx: Context, runner: PipelineRunner, boxes: dict[str, Box],
                          plan: Plan, shared: set[str]) -> None:
    # `shared` here: every box whose shard does not go through the console (shared or direct)
    """Before a relay starts: how many bytes, over which links, how long (measured now)."""
    from pipeline.units import fmt_bytes
    from remote.ops import shard_route

    by_box: dict[str, int] = {}
    for s in plan.shards:
        owner = plan.hosts[s["index"]]
        if not s["gathered"] and owner in boxes and owner not in shared:
            by_box[owner] = by_box.get(owner, 0) + int(s["tokens"]) * plan.bytes_per_token
    if not by_box:
        return
    rates = {}
    for name in by_box:
        box = boxes[name]
        rates[name] = await shard_route.measure(
            box.transport, runner.transport, await box.runner.root(), await runner.root())
    total = sum(by_box.values())
    legs = "; ".join(f"{n} -> console {fmt_bytes(r.down)}/s, console -> {runner.host.name} "
                     f"{fmt_bytes(r.up)}/s" for n, r in rates.items())
    took = shard_route.duration(shard_route.estimate_seconds(by_box, rates))
    ctx.warning(f"relaying through the console (--relay-through-console): about {total} B "
                f"({fmt_bytes(total)}) of hidden states from {', '.join(by_box)} to "
                f"{runner.host.name}, about {took} at the measured rates ({legs})",
                runner.host.name, relay_bytes=total, by_box=by_box)


def _refuse_moves(args: argparse.Namespace) -> None:
    """train.data = local-shards: a shard is trained where it was extracted, so it cannot move."""
    from remote.errors import UsageError

    for flag, given in (("--reassign", args.reassign), ("--reassign-lost", args.reassign_lost),
                        ("--relay-through-console", args.relay_through_console)):
        if given:
            raise UsageError(f"{flag}: train.data = \"local-shards\" trains each shard on the "
                             "box that extracted it, so no shard moves to another box: bring "
                             "the box back, or set train.data = \"gathered\"")


async def _check_boxes(runner: PipelineRunner, boxes: dict[str, Box], output_dir: str,
                       local_config: Path) -> None:
    """train.data = local-shards, before anything starts: the config as every box resolves it
    (its dataset and model must be valid there: each box runs its own prepare), and no box
    whose output_dir is the first box's own directory on shared storage (every box builds its
    own extract/ in its output_dir: two on one directory would collide; the marker tells a
    shared disk from two disks that show the same path)."""
    import asyncio

    from remote.errors import UsageError

    async def resolve(box: Box) -> str:
        await box.runner.source_dir()
        box.config = await box.runner.remote_config(local_config)
        return str((await box.runner.validate(box.config))["output_dir"])

    others = [b for name, b in boxes.items() if name != runner.host.name]
    dirs = await asyncio.gather(*(resolve(b) for b in others))
    same = [b.name for b, d in zip(others, dirs, strict=True) if d == output_dir]
    if not same:
        return
    sharing = await _sharing(runner, boxes, same, output_dir)
    shared = [name for name in same if name in sharing]
    if shared:
        raise UsageError(f"train.data = \"local-shards\": {', '.join(shared)} share(s) "
                         f"{runner.host.name}'s output_dir ({output_dir}) on one storage, where "
                         "every box would build its own extract: nothing started; give each box "
                         "an output_dir of its own, or set train.data = \"gathered\" (shared "
                         "storage moves no hidden-state byte either)")


async def run_sharded(ctx: Context, args: argparse.Namespace, runner: PipelineRunner,
                      config: str, resolved: dict[str, Any]) -> RunOutcome:
    """`resolved`: the config as the training box validated it (extract hosts, output_dir)."""
    from pipeline import stages as stage_table
    from remote.ops import pipeline as pipeline_ops
    from remote.ops.sharded_extract import ShardedExtract, check_hosts, shard_plan

    hosts, output_dir = list(resolved["extract_hosts"]), str(resolved["output_dir"])
    on_own = resolved.get("train_data") == LOCAL_SHARDS
    if on_own:
        _refuse_moves(args)
    reassign = reassigned(args)
    check_hosts(hosts, {*ctx.config.hosts, "local"}, reassign)
    boxes, down = await _connect(ctx, [h for h in hosts if h not in reassign],
                                 reassign_lost=args.reassign_lost)
    reassign |= set(down)
    relayed = 0
    try:
        if on_own:
            await _check_boxes(runner, boxes, output_dir, Path(args.pipeline).expanduser())
            shared: set[str] = set()
            direct: dict[str, str] = {}
            ctx.info("train.data = local-shards: each box extracts its shard into its own "
                     "output_dir and trains on it there; nothing is copied or relayed",
                     runner.host.name)
        else:
            shared, direct = await _routes(
                ctx, runner, boxes, output_dir, resolved, relay=args.relay_through_console)
        forced = bool(args.force) or args.start in stage_table.through(stage_table.EXTRACT)
        ctx.info(f"extract sharded across {', '.join(hosts)}"
                 + (f" ({', '.join(sorted(reassign))} left out)" if reassign else "")
                 + ("; each box keeps its own" if on_own else f"; gathered on {runner.host.name}"),
                 runner.host.name, hosts=hosts)
        first = await pipeline_ops.run_pipeline(
            runner, config, until=stage_table.PREPARE,
            start=stage_table.PREPARE if args.force or args.start == stage_table.PREPARE else None,
            reach=ctx.reach)
        if args.until == stage_table.PREPARE:
            return first
        plan = await shard_plan(runner, config, force=forced)
        if on_own:  # every box's job runs: it skips a finished shard, then builds its extract
            plan.complete = False
            for s in plan.shards:
                s["gathered"] = False
        if plan.complete:
            ctx.info(f"extract is complete on {runner.host.name} (its manifest matches): no "
                     "shard to run", runner.host.name)
            ctx.info("relayed through the console: 0 B", runner.host.name, relayed_bytes=0)
        else:
            with tempfile.TemporaryDirectory(prefix="eagle3-prepared-") as tmp:
                local = Path(tmp) / "train.jsonl"
                await runner.transport.get(plan.train_jsonl, local)
                rows = [r for r in local.read_text(encoding="utf-8").splitlines() if r.strip()]
            if not on_own:  # local shards relay nothing: no estimate, no link measured
                await _announce_relay(ctx, runner, boxes, plan, shared | set(direct))
            work = ShardedExtract(runner, config, Path(args.pipeline).expanduser(), boxes,
                                  reassign=reassign, reassign_lost=args.reassign_lost,
                                  force=forced, shared=shared,
                                  shared_dir=posixpath.join(output_dir, "extract-shards"),
                                  direct=direct,
                                  copy_port=int(resolved.get("extract_copy_port") or 0),
                                  local=on_own)
            try:
                outcome = await work.run(plan, rows)
            finally:
                relayed = work.outcome.relayed
                ctx.info(f"relayed through the console: {relayed} B", runner.host.name,
                         relayed_bytes=relayed)
                if direct or on_own:
                    ctx.info(f"copied box to box: {work.outcome.copied} B", runner.host.name,
                             copied_bytes=work.outcome.copied)
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
            if on_own:
                ctx.info(f"every shard extracted and kept on its own box (ran: {ran}); each "
                         "box's ranks train on its own", runner.host.name,
                         shards={str(k + 1): h for k, h in outcome.ran.items()})
            else:
                # Every shard is placed: what a lost box left on the shared storage goes too.
                await runner.transport.run(
                    ["rm", "-rf", posixpath.join(work.shared_dir, plan.tag)], timeout=600)
                await runner.transport.run(["rmdir", work.shared_dir], timeout=60)
                ctx.info(f"every shard gathered on {runner.host.name} (ran: {ran or 'none'})",
                         runner.host.name, shards={str(k + 1): h for k, h in outcome.ran.items()})
    finally:
        for b in boxes.values():
            if b.transport is not ctx.transports.get(b.name):
                await b.transport.close()
    later = stage_table.after(stage_table.EXTRACT) if forced else args.start
    return await pipeline_ops.run_pipeline(runner, config, start=later, until=args.until,
                                            reach=ctx.reach)
