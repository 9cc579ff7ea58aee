"""The per-node sampler of `[train] data = "local-shards"` (pipeline/trainers/shard_sampler.py):
a pure function checked on tiny lengths, every rank of every node, several epochs."""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path

import pytest

from pipeline import config as pconfig
from pipeline.errors import ConfigInvalid
from pipeline.shards import split
from pipeline.trainers.shard_sampler import NodeShards, NodeShardSampler, pack, plan_epoch
from tests.tiny_pipeline import tiny_pipeline


def _shards(lengths: list[int], n: int) -> NodeShards:
    return NodeShards(tuple((s.start, s.end) for s in split(lengths, n)))


@pytest.mark.parametrize("nodes,local_world", [(2, 1), (2, 2), (3, 2), (3, 1), (1, 3)])
def test_every_sample_once_on_its_own_node_with_equal_counts(nodes: int, local_world: int) -> None:
    rnd = random.Random(7)
    lengths = [rnd.randint(1, 40) for _ in range(53)]
    shards = _shards(lengths, nodes)
    split_at = int(len(lengths) * 0.9)  # speculators' train/val boundary
    for offset, part in ((0, lengths[:split_at]), (split_at, lengths[split_at:])):
        for epoch in range(3):
            plan = plan_epoch(part, offset, shards, 64, local_world, seed=5, epoch=epoch)
            counts = {len(b) for node in plan for b in node}
            assert len(counts) == 1, counts  # every rank runs the same number of batches
            seen: list[int] = []
            for k, node in enumerate(plan):
                start, end = shards.ranges[k]
                for batches in node:
                    for batch in batches:
                        assert sum(min(part[i], 64) for i in batch) <= 64
                        for i in batch:  # only its own node's shard
                            assert start <= offset + i < end
                        seen += batch
            assert sorted(seen) == list(range(len(part)))  # union = all, no duplicate


def test_order_changes_with_the_epoch_and_is_the_same_for_every_rank() -> None:
    lengths = [3] * 40
    shards = _shards(lengths, 2)
    a = plan_epoch(lengths, 0, shards, 9, 2, seed=1, epoch=0)
    assert a == plan_epoch(lengths, 0, shards, 9, 2, seed=1, epoch=0)
    assert a != plan_epoch(lengths, 0, shards, 9, 2, seed=1, epoch=1)


def test_short_nodes_are_padded_with_empty_batches() -> None:
    # Node 0 holds one long sample, node 1 many short ones: node 0's ranks end with [].
    lengths = [30, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
               1, 1, 1, 1]
    shards = NodeShards(((0, 1), (1, len(lengths))))
    plan = plan_epoch(lengths, 0, shards, 4, 1, seed=0, epoch=0)
    assert plan[0][0][0] == [0] and all(b == [] for b in plan[0][0][1:])
    assert len(plan[0][0]) == len(plan[1][0]) == 8  # 30 ones, 4 a batch


def test_a_node_without_samples_in_the_split_runs_empty_batches() -> None:
    # The validation split (the tail) lies in the last shard: the other node only pads.
    lengths = [5] * 10
    shards = NodeShards(((0, 6), (6, 10)))
    plan = plan_epoch(lengths[8:], 8, shards, 10, 1, seed=0, epoch=0)
    assert plan[0] == [[[]]] and [sorted(b) for b in plan[1][0]] == [[0, 1]]


def test_sampler_records_the_global_indices_it_handed_out() -> None:
    lengths = [2] * 12
    shards = NodeShards(((0, 5), (5, 12)))
    record: list[object] = []
    s = NodeShardSampler(lengths=lengths[:10], batch_max_length=4, offset=0, shards=shards,
                         node=1, local_rank=0, local_world=1, seed=0, record=record)
    s.set_epoch(1)
    assert len(s) == 3  # node 1 holds 5 of the split's samples: 3 batches of <= 2
    assert sorted(i for b in s for i in b) == [5, 6, 7, 8, 9]
    assert record == [(1, [5, 6, 7, 8, 9])]


def test_pack_keeps_every_index_and_the_limit() -> None:
    lengths = [5, 9, 1, 4, 100, 3]
    batches = pack(range(6), lengths, 10)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(sum(min(lengths[i], 10) for i in b) <= 10 for b in batches)
    with pytest.raises(ValueError, match="contiguous"):
        NodeShards(((0, 2), (3, 4)))


@pytest.mark.parametrize("extract, train, why", [
    ('hosts = ["a", "b"]\n', 'data = "local-shards"\n', "train.hosts must equal extract.hosts"),
    ('hosts = ["a", "b"]\n', 'data = "local-shards"\nhosts = ["b", "a"]\n',
     "the same order"),
    ("", 'data = "local-shards"\nhosts = ["a", "b"]\n', "extract.hosts []"),
    ('hosts = ["a", "b"]\n', 'data = "shards"\n', "train.data: 'shards' is not one of"),
    ('hosts = ["a", "b"]\n', 'data = "local-shards"\nhosts = ["a", "b"]\nspeculators = "0.3"\n',
     "needs speculators 0.9"),
])
def test_local_shards_config_is_refused_in_one_line_unless_whole(
        tmp_path: Path, extract: str, train: str, why: str) -> None:
    with pytest.raises(ConfigInvalid, match=re.escape(why)):
        pconfig.load(tiny_pipeline(tmp_path, train, extract=extract))
    ok = tiny_pipeline(tmp_path, 'data = "local-shards"\nhosts = ["a", "b"]\nspeculators = "0.9"\n',
                       extract='hosts = ["a", "b"]\n')
    assert pconfig.load(ok).train.data == "local-shards"


@pytest.mark.parametrize("flags, named", [
    ({"reassign": ["box2"]}, "--reassign"), ({"reassign_lost": True}, "--reassign-lost"),
    ({"relay_through_console": True}, "--relay-through-console")])
def test_console_refuses_moving_a_shard_that_trains_where_it_was_made(
        flags: dict[str, object], named: str) -> None:
    import argparse

    from console.sharded_run import _refuse_moves
    from remote.errors import UsageError

    args = argparse.Namespace(**{"reassign": None, "reassign_lost": False,
                                 "relay_through_console": False, **flags})
    with pytest.raises(UsageError, match=rf"^{named}: train.data = \"local-shards\""):
        _refuse_moves(args)
    _refuse_moves(argparse.Namespace(reassign=None, reassign_lost=False,
                                     relay_through_console=False))


def test_local_shards_retrain_but_the_default_keeps_earlier_train_keys(tmp_path: Path) -> None:
    import dataclasses
    import hashlib
    import json

    cfg = pconfig.load(tiny_pipeline(tmp_path, 'hosts = ["a", "b"]\n',
                                     extract='hosts = ["a", "b"]\n'))
    train = {k: v for k, v in dataclasses.asdict(cfg.train).items()
             if k not in ("addresses", "rdzv_port", "join_timeout", "data",
                          "checkpoint_every_steps", "checkpoint_every_minutes")}
    before = hashlib.sha256(json.dumps({"train": train},
                                       sort_keys=True).encode()).hexdigest()
    assert cfg.section_digest("train") == before  # as before the key existed
    local = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, data="local-shards"))
    assert local.section_digest("train") != before


def test_reported_validation_loss_leaves_the_pad_batches_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    """speculators 0.9's validation (trainer.val_epoch): each rank sums its batches' metrics
    (loss_sum = the batch's loss, loss_total = 1, a pad batch included with loss 0), the ranks'
    sums are added, divided by the batch count, and normalize_counted_metrics takes sum / total.
    With local shards the validation tail lies on the last box, so the other box's ranks only
    pad: the figure the stage reports must be the mean over the real batches."""
    from pipeline import progress
    from pipeline.trainers import cli

    lengths = [5] * 40
    shards = NodeShards(((0, 20), (20, 40)))
    offset = 34  # validation: the tail, all on node 1
    samplers = [NodeShardSampler(lengths=lengths[offset:], batch_max_length=10, offset=offset,
                                 shards=shards, node=n, local_rank=r, local_world=2, seed=3)
                for n in range(2) for r in range(2)]
    batch_loss = {i: 1.0 + i / 10 for i in range(len(lengths) - offset)}  # a batch: its samples'
    loss_sum = loss_total = 0.0
    real: list[float] = []
    for s in samplers:  # every rank, as speculators' collective sums them
        s.set_epoch(0)
        for batch in s:
            loss = sum(batch_loss[i] for i in batch) / len(batch) if batch else 0.0
            loss_sum, loss_total = loss_sum + loss, loss_total + 1
            if batch:
                real.append(loss)
    reported = loss_sum / loss_total  # speculators' loss_epoch
    assert 0 < len(real) < loss_total  # the other node padded: the raw figure is too low
    assert samplers[0].filled == (loss_total, len(real))
    handler = cli._MetricsToProgress(progress.Progress("train", 4, "steps"), epochs=1)
    handler.val_samplers = samplers[:1]  # this rank's, as the adapter keeps it
    handler.handle(logging.LogRecord("speculators.metrics", logging.INFO, __file__, 1,
                                     {"val": {"loss_epoch": reported, "full_acc_0_epoch": 0.5,
                                              "kl_loss_0_epoch": reported}, "epoch": 0},
                                     None, None))
    mean = round(sum(real) / len(real), 5)
    assert handler.val == {"loss_epoch": mean, "full_acc_0_epoch": 0.5, "kl_loss_0_epoch": mean}
    assert round(reported, 5) < mean  # what the stage reported before
    recs = [r for r in map(progress.parse, capsys.readouterr().out.splitlines()) if r]
    assert recs[-1]["val_loss"] == mean
