"""prepare: conversations → token ids with the target's own chat template, a loss mask on the
assistant turns only, token frequencies, and held-out prompts for evaluate.

The loss mask does not guess the template's markers: for assistant turn i it renders the
conversation up to turn i with the generation prompt, and up to turn i+1, and masks the tokens
whose characters fall between the two. That works for any template that renders a prefix of a
conversation as a prefix of the text (every chat template we know); one that does not is
reported, not silently mis-masked.

Self-distillation (data.regenerate = true): the assistant turns are regenerated greedily by the
target before tokenizing, so the head learns the target's own distribution instead of the
dataset author's. Off by default: it costs a generation pass over the dataset, and EAGLE-3 trains
on the verifier's logits at every position anyway; it helps most when the dataset was written by
a different model. Implemented for the hf backend (transformers generate).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.conversations import conversation_of, first_rows
from pipeline.errors import ConfigInvalid, PipelineError
from pipeline.progress import Progress, emit
from pipeline.runner import StageContext


def load_conversations(cfg: PipelineConfig) -> list[list[dict[str, str]]]:
    local = cfg.dataset_path()
    rows: list[Any]
    if local is not None:
        rows = list(first_rows(local))
    else:
        try:
            import datasets

            rows = list(datasets.load_dataset(cfg.data.dataset, split="train"))
        except Exception as exc:
            raise ConfigInvalid(str(cfg.path), f"data.dataset: cannot load {cfg.data.dataset!r} "
                                f"from the hub: {type(exc).__name__}: {exc}") from None
    convs = [c for c in (conversation_of(r) for r in rows) if c is not None]
    if not convs:
        raise ConfigInvalid(str(cfg.path), f"data.dataset: no row has conversations "
                            f"({len(rows)} rows read)")
    return convs


def load_tokenizer(cfg: PipelineConfig) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(cfg.model_path),
                                        trust_remote_code=cfg.target.trust_remote_code)
    if not getattr(tok, "chat_template", None):
        raise ConfigInvalid(str(cfg.path), f"target.model: the tokenizer in {cfg.model_path} "
                            "has no chat template")
    return tok


def tokenize_conversation(tok: Any, conv: list[dict[str, str]],
                          max_len: int) -> tuple[list[int], list[int]]:
    full = tok.apply_chat_template(conv, tokenize=False)
    spans = []
    for i, turn in enumerate(conv):
        if turn["role"] != "assistant":
            continue
        before = tok.apply_chat_template(conv[:i], tokenize=False, add_generation_prompt=True) \
            if i else ""
        through = tok.apply_chat_template(conv[: i + 1], tokenize=False)
        if not (through.startswith(before) and full.startswith(through)):
            raise PipelineError("the chat template does not render a conversation's prefix as a "
                                "prefix of its text: cannot place the loss mask")
        spans.append((len(before), len(through)))
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])[:max_len]
    offsets = list(enc["offset_mapping"])[:max_len]
    mask = [1 if any(a <= s < b for a, b in spans) and e > s else 0 for s, e in offsets]
    return ids, mask


def prompt_ids(tok: Any, conv: list[dict[str, str]]) -> tuple[list[int], list[dict[str, str]]]:
    first = next(i for i, t in enumerate(conv) if t["role"] == "assistant")
    text = tok.apply_chat_template(conv[:first], tokenize=False, add_generation_prompt=True)
    return list(tok(text, add_special_tokens=False)["input_ids"]), conv[:first]


def regenerate(cfg: PipelineConfig, tok: Any, convs: list[list[dict[str, str]]],
               progress: Progress) -> list[list[dict[str, str]]]:
    if cfg.extract.backend != "hf":
        raise ConfigInvalid(str(cfg.path), "data.regenerate: implemented with the hf backend "
                            "only; regenerate the dataset beforehand for vllm")
    import torch

    from pipeline.devices import pick_device, torch_dtype
    from pipeline.target import load_target

    device = pick_device(cfg.extract.device)
    model = load_target(cfg, device, torch_dtype(cfg.extract.dtype, device))
    out = []
    for conv in convs:
        new: list[dict[str, str]] = []
        for turn in conv:
            if turn["role"] != "assistant":
                new.append(turn)
                continue
            text = tok.apply_chat_template(new, tokenize=False, add_generation_prompt=True)
            ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"].to(device)
            with torch.no_grad():
                gen = model.generate(ids, max_new_tokens=cfg.data.regenerate_max_new_tokens,
                                     do_sample=False, pad_token_id=tok.pad_token_id)
            reply = tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True).strip()
            new.append({"role": "assistant", "content": reply})
        out.append(new)
        progress.advance()
    return out


def run(ctx: StageContext) -> tuple[list[Path], dict[str, Any]]:
    cfg = ctx.cfg
    tok = load_tokenizer(cfg)
    convs = load_conversations(cfg)
    rng = random.Random(cfg.data.seed)
    rng.shuffle(convs)
    n_eval = min(cfg.data.eval_samples, max(len(convs) - 1, 0))
    held_out, train = convs[:n_eval], convs[n_eval:]
    if cfg.data.samples:
        train = train[: cfg.data.samples]
    if cfg.data.regenerate:
        train = regenerate(cfg, tok, train, Progress("prepare", len(train), "regenerated"))

    progress = Progress("prepare", len(train), "conversations")
    freq: Counter[int] = Counter()
    n_tokens = n_masked = kept = 0
    train_path = ctx.workdir / "train.jsonl"
    with open(train_path, "w", encoding="utf-8") as fh:
        for conv in train:
            ids, mask = tokenize_conversation(tok, conv, cfg.data.max_seq_len)
            progress.advance()
            if sum(mask) == 0:
                continue  # the assistant turns fell past max_seq_len: nothing to learn
            fh.write(json.dumps({"input_ids": ids, "loss_mask": mask}) + "\n")
            kept += 1
            n_tokens += len(ids)
            n_masked += sum(mask)
            freq.update(i for i, m in zip(ids, mask, strict=True) if m)
    progress.update(len(train), force=True)
    if kept == 0:
        raise PipelineError("prepare: no conversation has an assistant token within "
                            f"max_seq_len={cfg.data.max_seq_len}")
    eval_path = ctx.workdir / "eval.jsonl"
    with open(eval_path, "w", encoding="utf-8") as fh:
        for conv in held_out:
            ids, turns = prompt_ids(tok, conv)
            fh.write(json.dumps({"prompt_ids": ids[: cfg.data.max_seq_len],
                                 "messages": turns}) + "\n")
    freq_path = ctx.workdir / "token_freq.json"
    freq_path.write_text(json.dumps({str(k): v for k, v in sorted(freq.items())}))
    summary = {"samples": kept, "tokens": n_tokens, "loss_tokens": n_masked,
               "eval_prompts": len(held_out), "distinct_loss_tokens": len(freq),
               "regenerated": cfg.data.regenerate}
    emit("info", "prepare", message=f"{kept} samples, {n_tokens} tokens "
         f"({n_masked} assistant), {len(held_out)} held-out prompts")
    return [train_path, eval_path, freq_path], summary
