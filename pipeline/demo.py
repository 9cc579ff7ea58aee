"""The local demo: a tiny target built from a config, a tokenizer trained here with a chat
template, a small conversation set and a pipeline config, all on CPU in well under a minute.

A target with random weights produces noise that no head can predict better than another, so
the demo target is trained briefly on the demo conversations, which have strong structure
(counting from a number by a step, walking the alphabet). Its greedy outputs are then
predictable from its hidden states, and a trained head measurably beats an untrained one. No
hub access: tokenizer (tokenizers WordLevel) and model (LlamaConfig) are built from scratch.

The target has 2 attention heads of 32 (hidden 64), not 4 of 16: vLLM's CPU attention refuses
head_dim 16 ("Unsupported CPU attention configuration"), and the demo ends by serving this
target with the trained head on a real vLLM (docs/design.md §7). A demo directory built by an older
recipe (DEMO_RECIPE differs) is rebuilt, never reused.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

from pipeline.progress import Progress

SPECIALS = ["<pad>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
NUMBERS = [f"n{i}" for i in range(60)]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
# Bumped whenever the target's construction changes: a demo directory of another recipe is rebuilt.
DEMO_RECIPE = "2x32-heads"
WORDS = ["count", "from", "by", "alphabet", "please", "go", "on", "steps"]


def conversations(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        if rng.random() < 0.7:
            step = rng.choice([1, 2, 3])
            length = rng.randint(6, 12)
            start = rng.randint(0, 59 - step * (length - 1))
            user = f"count from n{start} by n{step} please"
            reply = " ".join(f"n{start + step * j}" for j in range(length))
        else:
            length = rng.randint(6, 12)
            start = rng.randint(0, 26 - length)
            user = f"alphabet from {LETTERS[start]} go on n{length} steps"
            reply = " ".join(LETTERS[start:start + length])
        rows.append({"conversations": [{"role": "user", "content": user},
                                       {"role": "assistant", "content": reply}]})
    return rows


def build_tokenizer(model_dir: Path) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([*SPECIALS, *NUMBERS, *LETTERS, *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|end|>",
                                   additional_special_tokens=SPECIALS[2:5])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(model_dir))
    return fast


def build_target(model_dir: Path, tok: Any, rows: list[dict[str, Any]], *, steps: int,
                 seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    torch.set_num_threads(1)  # see cpu_threads in PIPELINE_TOML
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
        tie_word_embeddings=False, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id, bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    train_on_conversations(model, tok, rows, steps=steps, seed=seed,
                           progress=Progress("demo-setup", steps, "steps"))
    gen_cfg = model.generation_config
    if gen_cfg is not None:
        gen_cfg.eos_token_id = tok.eos_token_id
        gen_cfg.pad_token_id = tok.pad_token_id
    model.save_pretrained(str(model_dir), safe_serialization=True)


def train_on_conversations(model: Any, tok: Any, rows: list[dict[str, Any]], *, steps: int,
                           seed: int, progress: Progress | None = None) -> float:
    """A few hundred steps of next-token training on the chat-formatted conversations (batches
    of 32, AdamW 3e-3): enough for a tiny target's greedy outputs to follow the rows' structure,
    so a head has something to predict. Leaves the model in eval mode; returns the last loss.
    The demo target and the tests' tiny targets (tests/tiny_targets.py) are trained by it."""
    import torch

    texts = [tok.apply_chat_template(r["conversations"], tokenize=False) for r in rows]
    enc = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(len(e) for e in enc)
    ids = torch.full((len(enc), width), tok.pad_token_id, dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, : len(e)] = torch.tensor(e)
    labels = ids.masked_fill(ids == tok.pad_token_id, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    loss = float("nan")
    for _ in range(steps):
        batch = torch.randint(0, len(enc), (32,), generator=gen)
        out = model(input_ids=ids[batch], labels=labels[batch])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        loss = out.loss.detach().item()
        if progress is not None:
            progress.advance(loss=round(loss, 4))
    model.eval()
    return loss


PIPELINE_TOML = """\
{title}
output_dir = "{output_dir}"
cpu_threads = 1         # a tiny model on a shared CPU: one thread beats several

[target]
model = "{model}"{trust}

[data]
dataset = "{dataset}"
max_seq_len = 64{samples}
eval_samples = {eval_samples}
seed = 0

[extract]
backend = "{backend}"
layer_ids = [1, 2, 3]   # ids 1..3 enter layers 1..3; id 4 (the last layer's output) is added
device = "cpu"
dtype = "{dtype}"
reserve_bytes = 0

[vocab]
draft_vocab_size = 96

[train]
epochs = {epochs}
lr = 3e-3
num_layers = 1
ttt_steps = 3
total_seq_len = 512
device = "cpu"
noise_std = 0.0

[evaluate]
num_speculative_tokens = 3
max_new_tokens = {max_new_tokens}
device = "cpu"
baseline = true
"""


def pipeline_toml(*, title: str = "# The local demo: a tiny 4-layer target on CPU. Every path is "
                  "relative to this file.", output_dir: str = "out", model: str = "target",
                  dataset: str = "conversations.jsonl", epochs: int = 8, samples: int | None = None,
                  eval_samples: int = 8, backend: str = "hf", dtype: str = "float32",
                  max_new_tokens: int = 24, trust_remote_code: bool = False) -> str:
    """The pipeline config of a tiny target on CPU: the demo's (the defaults), or a test's tiny
    target with its own paths and knobs (tests/tiny_targets.py)."""
    return PIPELINE_TOML.format(
        title=title, output_dir=output_dir, model=model, dataset=dataset, epochs=epochs,
        samples="" if samples is None else f"\nsamples = {samples}", eval_samples=eval_samples,
        backend=backend, dtype=dtype, max_new_tokens=max_new_tokens,
        trust="\ntrust_remote_code = true" if trust_remote_code else "")


def build_demo(directory: str | Path, *, rows: int = 240, target_steps: int = 250,
               epochs: int = 8, seed: int = 0) -> Path:
    """Build (or reuse) the demo under `directory`; returns the pipeline config path.
    Reuse keeps a second run's manifests valid: the inputs are only rebuilt when absent."""
    root = Path(directory).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    model_dir = root / "target"
    data = root / "conversations.jsonl"
    cfg_path = root / "pipeline.toml"
    recipe = root / ".demo-recipe"
    current = recipe.read_text().strip() if recipe.exists() else ""
    if current != DEMO_RECIPE or not (model_dir / "model.safetensors").exists():
        convs = conversations(rows, seed)
        partial = root / ".target.partial"
        partial.mkdir(exist_ok=True)
        tok = build_tokenizer(partial)
        build_target(partial, tok, convs, steps=target_steps, seed=seed)
        if model_dir.exists():
            shutil.rmtree(model_dir)
        partial.rename(model_dir)
        tmp = data.with_suffix(".part")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in convs))
        tmp.rename(data)
        recipe.write_text(DEMO_RECIPE + "\n")
    if not cfg_path.exists():
        cfg_path.write_text(pipeline_toml(epochs=epochs))
    return cfg_path
