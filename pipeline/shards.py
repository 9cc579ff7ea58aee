"""Sharded extraction: the prepared samples cut into contiguous shards, one per box
(`[extract] hosts = ["a", "b", "c"]`), balanced by token count. Standard library only.

Why contiguous: a shard is then two numbers (its first sample and its end), a shard's files
renumbered by adding its first index land exactly where a one-box extraction puts them, and the
gathered directory is that extraction, file for file. Why by tokens, not samples: extraction
time and bytes grow with tokens (prefill), and a dataset sorted or grouped by length would
leave one box with all the long samples.

The cut is a pure function of the lengths and the shard count (no clock, no randomness): the
console and every box compute the same shards, and a rerun of a lost shard on another box
extracts exactly the samples the lost box had.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shard:
    index: int
    start: int  # first sample (global index)
    end: int  # one past the last sample
    tokens: int

    @property
    def count(self) -> int:
        return self.end - self.start

    def to_dict(self) -> dict[str, int]:
        return {"index": self.index, "start": self.start, "end": self.end, "tokens": self.tokens}


def split(lengths: Sequence[int], n: int) -> list[Shard]:
    """`n` contiguous shards covering every sample once, in order, balanced by tokens.

    Cut k (k = 1..n-1) falls at the sample boundary whose running token total is nearest to
    k/n of the whole (ties: the earlier boundary), kept after the previous cut and leaving
    room for one sample per later shard, so no shard is empty while there are at least `n`
    samples (with fewer, the last shards are empty). Each shard's tokens then differ from the
    ideal total/n by at most the longest sample."""
    if n < 1:
        raise ValueError(f"shard count must be >= 1, got {n}")
    if any(x < 0 for x in lengths):
        raise ValueError("sample lengths must be >= 0")
    count = len(lengths)
    prefix = [0, *itertools.accumulate(lengths)]
    total = prefix[-1]
    cuts = [0]
    for k in range(1, n):
        lo = min(cuts[-1] + 1, count)  # at least one sample in the shard before this cut
        hi = max(lo, count - (n - k))  # and one for each shard after it
        ideal = total * k / n
        best = lo
        for i in range(lo, hi + 1):
            if abs(prefix[i] - ideal) < abs(prefix[best] - ideal):
                best = i
        cuts.append(best)
    cuts.append(count)
    return [Shard(k, cuts[k], cuts[k + 1], prefix[cuts[k + 1]] - prefix[cuts[k]])
            for k in range(n)]


def rows_digest(rows: Sequence[dict[str, Any]]) -> str:
    """The samples a shard holds, as one hash (token ids and loss masks, in order)."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps([row["input_ids"], row["loss_mask"]],
                            separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


def shard_key(config_digest: str, fmt: str, rows: Sequence[dict[str, Any]]) -> str:
    """What a shard's files were made from: the config sections extraction reads (target and
    extract, without the host list: a shard rerun elsewhere is the same shard), the on-disk
    format, and its samples. A shard directory under another key is wiped before reuse."""
    blob = json.dumps({"config": config_digest, "format": fmt, "rows": rows_digest(rows)},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


SHARD_MANIFEST = "shard.json"


def shard_dir_name(shard: Shard, n: int) -> str:
    return f"shard-{shard.index + 1}-of-{n}"
