"""The [data] keys of regeneration through vLLM (pipeline/regenerate.py), apart from
pipeline/config.py so that the config module stays one screenful per concern:

    regenerate_max_new_tokens = 256   # an answer's token limit (both routes)
    regenerate_temperature = 0.0      # 0: greedy
    regenerate_top_p = 1.0
    regenerate_seed = 0               # a request's seed: this + the conversation's index
    regenerate_concurrency = 16       # conversations in flight at once
    regenerate_timeout = 600.0        # seconds one request may take before it is skipped
    regenerate_keep_thinking = true   # false: answers only, thinking dropped
    regenerate_reasoning_parser = ""  # --reasoning-parser of the server prepare starts
    vllm_url = ""                     # a server already up; empty: prepare starts one

Checked on a parsed config (duck-typed: this module is imported by pipeline.config).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pipeline.errors import ConfigInvalid

# What says where and how fast answers are regenerated, not what they are (left out of the
# prepare key), and every key added with the vLLM route (left out while regenerate is off, so
# earlier prepare manifests stay valid).
REGENERATE_HOW = ("vllm_url", "regenerate_concurrency", "regenerate_timeout")
REGENERATE_KEYS = ("regenerate_temperature", "regenerate_top_p", "regenerate_seed",
                   "regenerate_keep_thinking", "regenerate_reasoning_parser", *REGENERATE_HOW)


def regenerate_route(cfg: Any) -> str:
    """How prepare regenerates: "vllm" (a server prepare starts with the extract stage's engine
    settings, or the one at data.vllm_url) or "hf" (transformers generate in-process)."""
    return "vllm" if cfg.data.vllm_url or cfg.extract.backend == "vllm" else "hf"


def check(cfg: Any) -> None:
    """The regeneration keys of a parsed config (pipeline.config), each refused in one line."""
    src, d = str(cfg.path), cfg.data
    if d.regenerate_max_new_tokens < 1:
        raise ConfigInvalid(src, "data.regenerate_max_new_tokens: must be >= 1, got "
                            f"{d.regenerate_max_new_tokens}")
    if d.regenerate_temperature < 0:
        raise ConfigInvalid(src, "data.regenerate_temperature: must be >= 0 (0: greedy), got "
                            f"{d.regenerate_temperature}")
    if not 0 < d.regenerate_top_p <= 1:
        raise ConfigInvalid(src, f"data.regenerate_top_p: must be in (0, 1], got "
                            f"{d.regenerate_top_p}")
    if d.regenerate_concurrency < 1:
        raise ConfigInvalid(src, "data.regenerate_concurrency: must be >= 1 (requests in "
                            f"flight), got {d.regenerate_concurrency}")
    if d.regenerate_timeout <= 0:
        raise ConfigInvalid(src, "data.regenerate_timeout: must be > 0 (seconds a request may "
                            f"take), got {d.regenerate_timeout}")
    url = d.vllm_url
    if url and not (urlsplit(url).scheme in ("http", "https") and urlsplit(url).hostname):
        raise ConfigInvalid(src, f"data.vllm_url: {url!r} is not an http(s) URL (a vLLM "
                            "OpenAI server, e.g. http://127.0.0.1:8000)")
