"""The tiny pipeline most pipeline tests start from: a target's config.json (no weights), a
one-conversation dataset and a pipeline.toml naming both by paths relative to it.

One builder so that a key every config needs is added here once, not in each test that writes a
config of its own; a test states only what it changes (an extra key, another layer list)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Eight layers of width 64: layer ids 1..7 are valid, the default ids (2, 4, 5) fit.
TARGET = {"num_hidden_layers": 8, "hidden_size": 64, "vocab_size": 100,
          "intermediate_size": 128, "num_attention_heads": 4}
HELLO = {"conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def tiny_model(root: Path, name: str = "model", **config: object) -> Path:
    """root/name/config.json: TARGET with `config` over it; returns the directory."""
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({**TARGET, **config}))
    return d


def tiny_dataset(root: Path, rows: list[dict[str, object]] | None = None) -> Path:
    """root/conv.jsonl: `rows` (one short conversation unless given)."""
    p = root / "conv.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in (rows if rows is not None else [HELLO])))
    return p


def pipeline_toml(root: Path, extra: str = "", *, name: str = "pipeline.toml", model: str = "model",
                  dataset: str = "conv.jsonl", layer_ids: str = "[2, 4, 5]", reserve: str = "0",
                  draft_vocab: int = 50, extract: str = "") -> Path:
    """root/name: the config over tiny_model and tiny_dataset; `extract` lines go on in
    [extract], `extra` lines in [train] (or open sections of their own)."""
    p = root / name
    p.write_text(f"""output_dir = "out"
[target]
model = "{model}"
[data]
dataset = "{dataset}"
max_seq_len = 64
[extract]
layer_ids = {layer_ids}
reserve_bytes = {reserve}
{extract}[vocab]
draft_vocab_size = {draft_vocab}
[train]
total_seq_len = 128
{extra}""")
    return p


def tiny_pipeline(root: Path, extra: str = "", **toml: Any) -> Path:
    """The model, the dataset and the config in root; returns the config's path."""
    tiny_model(root)
    tiny_dataset(root)
    return pipeline_toml(root, extra, **toml)
