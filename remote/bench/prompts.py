"""Prompt sets for the load driver: the shipped prompts.jsonl, or any JSONL of prompts or
conversations.

Accepted rows (one JSON value per line): a string; {"prompt"|"text"|"instruction": str}
(with an optional "input" appended to an instruction); {"messages": [{"role", "content"}]}
(OpenAI); {"conversations": [{"from", "value"}]} (ShareGPT). Trailing assistant turns are
dropped: the benchmark asks the model to write the next reply. An object row may carry
`"category"` (a non-empty string: chat, code, math, long context, ...): the bench then measures
each category in a window of its own and reports its acceptance and speedup beside the mean
(remote/bench/driver.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from remote.errors import UsageError

Messages = list[dict[str, str]]

BUILTIN = "builtin:prompts.jsonl"
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bing": "assistant", "bard": "assistant",
                   "system": "system"}


@dataclass(frozen=True)
class PromptSet:
    name: str
    sha256: str  # of the file's bytes: two runs compare only if they used the same prompts
    conversations: list[Messages]
    # one per conversation ("" where its row named none); empty: no row named a category
    categories: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.conversations)

    def by_category(self) -> dict[str, PromptSet]:
        """Category -> its prompts, in the order first seen; {} when no row names one. Rows
        without a category, in a file where others have one, are the category "other"."""
        if not self.categories:
            return {}
        groups: dict[str, list[Messages]] = {}
        for conv, cat in zip(self.conversations, self.categories, strict=True):
            groups.setdefault(cat or "other", []).append(conv)
        return {cat: PromptSet(f"{self.name}#{cat}", self.sha256, convs)
                for cat, convs in groups.items()}

    def get(self, i: int) -> Messages:
        return self.conversations[i % len(self.conversations)]


def load_prompts(path: str | Path | None = None) -> PromptSet:
    if path is None or str(path) == BUILTIN:
        data = resources.files("remote.bench").joinpath("prompts.jsonl").read_bytes()
        name = BUILTIN
    else:
        p = Path(path).expanduser()
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise UsageError(f"prompts file {p}: {exc.strerror or exc}") from None
        name = str(p)
    return parse_prompts(data, name)


def parse_prompts(data: bytes, name: str) -> PromptSet:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{name}: not UTF-8 text") from None
    conversations: list[Messages] = []
    categories: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{name}:{lineno}: not JSON ({exc.msg})") from None
        messages = _row_messages(row)
        if messages is None:
            raise UsageError(
                f"{name}:{lineno}: expected a string or an object with prompt, text, "
                "instruction, messages or conversations"
            )
        if not messages:
            raise UsageError(f"{name}:{lineno}: the conversation has no user turn")
        conversations.append(messages)
        categories.append(_row_category(row, f"{name}:{lineno}"))
    if not conversations:
        raise UsageError(f"{name}: no prompts in the file")
    return PromptSet(name, hashlib.sha256(data).hexdigest(), conversations,
                     categories if any(categories) else [])


def _row_category(row: Any, where: str) -> str:
    if not isinstance(row, dict) or "category" not in row:
        return ""
    cat = row["category"]
    if not isinstance(cat, str) or not cat.strip():
        raise UsageError(f"{where}: \"category\" must be a non-empty string, not {cat!r}")
    return cat.strip()


def _row_messages(row: Any) -> Messages | None:
    if isinstance(row, str):
        return [{"role": "user", "content": row}] if row.strip() else []
    if not isinstance(row, dict):
        return None
    for key in ("prompt", "text"):
        if isinstance(row.get(key), str):
            return [{"role": "user", "content": row[key]}] if row[key].strip() else []
    if isinstance(row.get("instruction"), str):
        content = row["instruction"]
        if isinstance(row.get("input"), str) and row["input"].strip():
            content += "\n\n" + row["input"]
        return [{"role": "user", "content": content}]
    turns: list[dict[str, str]] = []
    if isinstance(row.get("messages"), list):
        for m in row["messages"]:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                return None
            turns.append({"role": str(m.get("role", "user")), "content": m["content"]})
    elif isinstance(row.get("conversations"), list):
        for m in row["conversations"]:
            if not isinstance(m, dict) or not isinstance(m.get("value"), str):
                return None
            role = _SHAREGPT_ROLES.get(str(m.get("from", "human")).lower(), "user")
            turns.append({"role": role, "content": m["value"]})
    else:
        return None
    while turns and turns[-1]["role"] == "assistant":
        turns.pop()
    if not any(t["role"] == "user" for t in turns):
        return []
    return turns
