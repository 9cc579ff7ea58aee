"""Training on local shards (`[train] data = "local-shards"`): each box's ranks pack only the
samples of the shard that box extracted, and never ask for another box's hidden states.

Why a sampler of our own: speculators 0.9's `MultipackDistributedBatchSamplerV2` permutes every
index of the dataset each epoch and packs them across all ranks, so any rank may be handed any
sample (docs/pipeline.md). `plan_epoch` replaces that packing with one per node:

- node k (the box holding shard k: samples `start..end` of prepare's, a pure function of the
  sample lengths, pipeline/shards.py) packs the samples of its shard that fall in this split
  (train or validation: speculators splits the dataset at `int(len * 0.9)`), in an order drawn
  from (seed, epoch), first-fit into batches of at most `batch_max_length` tokens (a longer
  sample is clipped to it, as speculators' sampler does), and deals them round robin to its
  local ranks;
- every rank of every node must run the same number of batches (DDP all-reduces each step),
  so every rank recomputes every node's packing (pure: shards and lengths are the same
  everywhere) and the shorter ranks are padded with empty batches (`[]`): speculators' collate
  turns an empty batch into its own "locally empty" sample, whose loss mask is empty, so the
  pad adds zero loss and zero gradient (its rank's share of DDP's gradient average is zero,
  so that step's gradient is the real ranks' sum / world size: the same scaling as a short
  final batch gets). speculators' validation loss is a mean over batches, so it counts a pad
  as a batch of loss 0: the adapter scales the loss figures it reports by every rank's
  batches over the real ones (`filled`), which gives the mean over the real batches.
- nothing is dropped or repeated: every sample of the split is in exactly one batch of exactly
  one rank each epoch (speculators' own sampler drops up to world size - 1 samples an epoch).

Standard library only: the console's tests check the packing without torch; the adapter
(pipeline/trainers/cli.py) installs `NodeShardSampler` in speculators' dataloader module.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.config_types import PipelineConfig


@dataclass(frozen=True)
class NodeShards:
    """The shards, one per node, as global sample ranges (start, end), in node order."""

    ranges: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        prev = 0
        for start, end in self.ranges:
            if start != prev or end < start:
                raise ValueError(f"shards must be contiguous from 0: {list(self.ranges)}")
            prev = end


def _order(indices: Sequence[int], seed: int, epoch: int) -> list[int]:
    """The epoch's order of a node's samples: a hash of (seed, epoch, index), the same on
    every machine and Python (no RNG whose stream could change between versions)."""
    def key(i: int) -> bytes:
        return hashlib.sha256(f"{seed}:{epoch}:{i}".encode()).digest()

    return sorted(indices, key=key)


WINDOW = 16  # open batches first-fit looks back over: linear time on 50k-sample shards


def pack(indices: Sequence[int], lengths: Sequence[int], max_len: int) -> list[list[int]]:
    """First-fit packing in the given order over the last `WINDOW` batches: each batch at most
    `max_len` tokens (a longer sample clipped to it), every index in exactly one batch."""
    batches: list[list[int]] = []
    room: list[int] = []
    for i in indices:
        n = min(int(lengths[i]), max_len)
        first = max(0, len(room) - WINDOW)
        for b in range(first, len(room)):
            free = room[b]
            if n <= free:
                batches[b].append(i)
                room[b] -= n
                break
        else:
            batches.append([i])
            room.append(max_len - n)
    return batches


def plan_epoch(lengths: Sequence[int], offset: int, shards: NodeShards, max_len: int,
               local_world: int, seed: int, epoch: int) -> list[list[list[list[int]]]]:
    """Every rank's batches for one epoch of one split: [node][local rank] -> batches, each a
    list of indices into the split (`lengths` is the split's, its sample 0 is global sample
    `offset`). Every rank has the same number of batches: the shorter ones end with `[]`."""
    if local_world < 1:
        raise ValueError(f"local world size must be >= 1, got {local_world}")
    n = len(lengths)
    per_rank: list[list[list[list[int]]]] = []
    for start, end in shards.ranges:
        lo, hi = max(start - offset, 0), min(end - offset, n)
        mine = list(range(lo, hi)) if hi > lo else []
        batches = pack(_order(mine, seed, epoch), lengths, max_len)
        per_rank.append([batches[r::local_world] for r in range(local_world)])
    most = max((len(b) for node in per_rank for b in node), default=0)
    most = max(most, 1)  # every rank runs at least one (maybe empty) batch
    return [[b + [[] for _ in range(most - len(b))] for b in node] for node in per_rank]


class NodeShardSampler:
    """The batch sampler of one rank: its node's `plan_epoch` share, epoch by epoch. Same
    interface as speculators' MultipackDistributedBatchSamplerV2 (iter, len, set_epoch)."""

    def __init__(self, *, lengths: Sequence[int], batch_max_length: int, offset: int,
                 shards: NodeShards, node: int, local_rank: int, local_world: int, seed: int,
                 max_batches: int | None = None, record: list[Any] | None = None) -> None:
        self.lengths = [int(x) for x in lengths]
        self.batch_max_length = batch_max_length
        self.offset = offset
        self.shards = shards
        self.node, self.local_rank, self.local_world = node, local_rank, local_world
        self.seed = seed
        self.max_batches = max_batches
        self.epoch = 0
        self.record = record  # (epoch, global indices) appended per epoch iterated
        self._cache: tuple[int, list[list[int]]] = (-1, [])
        self.filled = (1, 1)  # (batches of every rank, the real ones among them): the last epoch's

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        if self._cache[0] != self.epoch:
            plan = plan_epoch(self.lengths, self.offset, self.shards, self.batch_max_length,
                              self.local_world, self.seed, self.epoch)
            cut = plan if self.max_batches is None else [
                [b[:self.max_batches] for b in node] for node in plan]
            ranks = [b for node in cut for b in node]
            self.filled = (sum(map(len, ranks)), sum(1 for b in ranks for x in b if x))
            self._cache = (self.epoch, cut[self.node][self.local_rank])
        return self._cache[1]

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self) -> Any:
        got = self.batches()
        if self.record is not None:
            self.record.append((self.epoch, sorted(self.offset + i for b in got for i in b)))
        return iter(got)


LOCAL_SHARDS = "local-shards"  # train.data: each box trains on the shard it extracted
TRAIN_DATA = ("gathered", LOCAL_SHARDS)


def local_shards_refusal(cfg: PipelineConfig) -> str:
    """Why `train.data` cannot be what it is ('' when it can): local shards need each train
    box to be the box that extracted a shard, one shard each, in the same order."""
    t, hosts = cfg.train, list(cfg.extract.hosts)
    if t.data not in TRAIN_DATA:
        return f"train.data: {t.data!r} is not one of {TRAIN_DATA}"
    if t.data == "gathered":
        return ""
    if len(hosts) < 2 or list(t.hosts) != hosts:
        return ("train.data = \"local-shards\": each box trains on the shard it extracted, so "
                "train.hosts must equal extract.hosts (two or more, the same order); got "
                f"train.hosts {list(t.hosts)}, extract.hosts {hosts} (or train.data = "
                "\"gathered\": docs/pipeline.md)")
    if t.mode != "offline":
        return ("train.data = \"local-shards\" trains from the states each box extracted: it "
                "needs train.mode = \"offline\"")
    from pipeline.formats import installed

    version = t.speculators if t.speculators != "auto" else installed() or ""
    if version.startswith("0.3"):  # its library Trainer's own sampler; and no CPU ranks at all
        return ("train.data = \"local-shards\" needs speculators 0.9 (its batch sampler is "
                f"replaced per box); this config trains with speculators {version}: set "
                "train.data = \"gathered\"")
    return ""
