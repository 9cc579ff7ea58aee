"""A text-only view of the target for speculators 0.3's Eagle3DraftModel, so the 0.3 training
path works on multimodal wrappers (Kimi-K2.5, Llava-style) without editing speculators.

Why: speculators 0.3.0's `_setup_embeddings_and_lm_heads` (models/eagle3/core.py) reads the
verifier with `AutoConfig.from_pretrained(name_or_path)` — no trust_remote_code, so a checkpoint
with `auto_map` prompts `[y/N]` on a terminal and dies with EOFError in a detached job — then
takes `hidden_size`/`vocab_size` from the top level (absent when they live in `text_config`),
then loads the tensors `model.embed_tokens.weight` and `lm_head.weight` by those exact names
(a wrapper has `language_model.model.embed_tokens.weight`, `model.language_model...`, ...).

The view is a directory with the text config (top level, no auto_map) and a safetensors file
holding just those two tensors under the names speculators asks for. A plain text model needs
no view: its own directory is returned. Runs on the box with the pipeline's python (no
`console`/`remote` imports).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError

EMBED = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"


def weight_names(model_dir: Path) -> dict[str, str]:
    """tensor name -> shard file, from the index or the single model.safetensors."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        return dict(json.loads(index.read_text())["weight_map"])
    single = model_dir / "model.safetensors"
    if not single.exists():
        raise PipelineError(f"{model_dir}: no model.safetensors(.index.json): the speculators "
                            "0.3 training path reads the target's embeddings from safetensors")
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as f:
        return {k: "model.safetensors" for k in f.keys()}  # noqa: SIM118


def _pick(names: list[str], suffix: str, avoid: tuple[str, ...]) -> str | None:
    """The text model's tensor ending in `suffix` (not a vision tower's / MTP layer's)."""
    found = [n for n in names if n.endswith(suffix) and not any(a in n for a in avoid)]
    return min(found, key=len) if found else None


def needs_view(model_dir: Path) -> bool:
    raw = json.loads((model_dir / "config.json").read_text())
    if raw.get("auto_map") or "hidden_size" not in raw or "vocab_size" not in raw:
        return True
    names = weight_names(model_dir)
    return EMBED not in names or (LM_HEAD not in names and not raw.get("tie_word_embeddings"))


def verifier_dir(model_dir: Path, cache_dir: Path) -> Path:
    """The directory speculators 0.3 should read the verifier from (the model's own when it is
    a plain text model, else a view under cache_dir, built once per model digest)."""
    if not needs_view(model_dir):
        return model_dir
    raw = json.loads((model_dir / "config.json").read_text())
    text: dict[str, Any] = dict(raw.get("text_config") or raw)
    for key in ("hidden_size", "vocab_size"):
        if key not in text:
            raise PipelineError(f"{model_dir}/config.json: no {key} at the top level or in "
                                "text_config")
    names = weight_names(model_dir)
    avoid = ("vision", "visual", "mm_projector", "multi_modal", "audio")
    embed = _pick(list(names), "embed_tokens.weight", avoid)
    head = _pick(list(names), "lm_head.weight", avoid)
    if embed is None:
        raise PipelineError(f"{model_dir}: no embed_tokens.weight tensor for the text model")
    if head is None and not (text.get("tie_word_embeddings") or raw.get("tie_word_embeddings")):
        raise PipelineError(f"{model_dir}: no lm_head.weight tensor and embeddings not tied")
    stamp = hashlib.sha256(json.dumps([raw, embed, head, sorted(set(names.values()))],
                                      sort_keys=True).encode()).hexdigest()[:12]
    view = cache_dir / f"verifier-view-{stamp}"
    if (view / "model.safetensors").exists():
        return view
    from safetensors import safe_open
    from safetensors.torch import save_file

    tensors = {}
    for ours, theirs in ((EMBED, embed), (LM_HEAD, head or embed)):
        with safe_open(str(model_dir / names[theirs]), framework="pt") as f:
            tensors[ours] = f.get_tensor(theirs).contiguous()
    text.pop("auto_map", None)
    try:
        from transformers import CONFIG_MAPPING

        known = text.get("model_type") in CONFIG_MAPPING
    except ImportError:
        known = False
    if not known:  # AutoConfig must not need remote code: keep only what speculators reads
        text = {"model_type": "llama", "hidden_size": text["hidden_size"],
                "vocab_size": text["vocab_size"], "pad_token_id": text.get("pad_token_id")}
    text["architectures"] = raw.get("architectures") or text.get("architectures")
    text["eagle3_console_view_of"] = str(model_dir)
    tmp = cache_dir / f".{view.name}.part"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.json").write_text(json.dumps(text, indent=2))
    save_file(tensors, str(tmp / "model.safetensors"))
    if view.exists():
        shutil.rmtree(view)
    tmp.rename(view)
    return view
