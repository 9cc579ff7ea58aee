"""The dataset as the pipeline reads it: rows of conversations ({role, content} turns under
`conversations` or `messages`, ShareGPT's from/value form included), checked when the config
is validated (a few rows, before any work starts) and normalised by prepare."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.config_types import PipelineConfig, resolve
from pipeline.errors import ConfigInvalid


def check_dataset(cfg: PipelineConfig) -> None:
    """A local dataset's first rows are conversations (refused with one line if not); a hub
    name is left to prepare, where the box can reach the hub."""
    src = str(cfg.path)
    local = cfg.dataset_path()
    if local is None:
        name = cfg.data.dataset
        looks_local = name.endswith((".json", ".jsonl")) or "/" not in name or name.startswith(
            (".", "/", "~"))
        if looks_local:
            raise ConfigInvalid(src, f"data.dataset: {resolve(cfg.path, name)} not found")
        return  # a hub dataset name: checked by prepare where the box can reach the hub
    try:
        rows = list(first_rows(local, 5))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ConfigInvalid(src, f"data.dataset: {local}: cannot read rows: {exc}") from None
    if not rows:
        raise ConfigInvalid(src, f"data.dataset: {local} has no rows")
    for i, row in enumerate(rows):
        if conversation_of(row) is None:
            keys = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ConfigInvalid(src, f"data.dataset: {local} row {i} has no conversations "
                                f"(a list of {{role, content}} under 'conversations' or "
                                f"'messages'; found keys {keys})")


def first_rows(path: Path, n: int | None = None) -> Any:
    """The first `n` rows (None: all) of a .jsonl file, or of a .json list (or its
    "data"/"rows"): what validate samples is what prepare reads."""
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if n is not None and i >= n:
                    return
                if line.strip():
                    yield json.loads(line)
    else:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            data = data.get("data") or data.get("rows") or [data]
        yield from list(data)[:n]


_ROLE_ALIASES = {"human": "user", "gpt": "assistant", "bot": "assistant", "model": "assistant",
                 "user": "user", "assistant": "assistant", "system": "system"}


def conversation_of(row: Any) -> list[dict[str, str]] | None:
    """Normalised [{role, content}] from a row with 'conversations' or 'messages' (ShareGPT's
    from/value form included), or None when the row has neither or no assistant turn."""
    if not isinstance(row, dict):
        return None
    turns = row.get("conversations", row.get("messages"))
    if not isinstance(turns, list) or not turns:
        return None
    out = []
    for t in turns:
        if not isinstance(t, dict):
            return None
        role = t.get("role", t.get("from"))
        content = t.get("content", t.get("value"))
        if not isinstance(role, str) or not isinstance(content, str):
            return None
        role = _ROLE_ALIASES.get(role.lower())
        if role is None:
            return None
        out.append({"role": role, "content": content})
    if not any(t["role"] == "assistant" for t in out):
        return None
    return out
