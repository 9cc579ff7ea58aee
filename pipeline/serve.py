"""serve: vLLM's OpenAI server for the pipeline's target, with the head train wrote or without.

`python -m pipeline serve --config FILE --port P [--baseline] [--draft D] [--k K]
[-- VLLM_ARGS...]` runs on the box as a detached job (the console's `serve` step). The target is
always the pipeline's `target.model`; the draft (`--draft`, DRAFTS) is one of:

- `pipeline` (the default): `<output_dir>/train/speculative_config.json`, the JSON train wrote
  next to the checkpoint, so the head is served with the layer ids and token count it was
  trained and evaluated with (never a hand-written copy);
- `none`: the target alone (what `--baseline` serves, for the speedup's denominator);
- `ngram`: vLLM's prompt-lookup proposer (method "ngram", prompt_lookup_min/max NGRAM_LOOKUP);
- a directory: an EAGLE-3 head already on the box (speculators format, or the common EAGLE-3
  HF format), served with method "eagle3".

`--k` sets num_speculative_tokens (default: train's value for the pipeline's head, the head's
own `speculators_config` value or train's for a directory, NGRAM_K for ngram).

The process replaces itself with the server (os.execv): the job's pid and process group are
vLLM's, so cancelling the job ends the API server and its engine processes together, and the
job's exit status is vLLM's own.

`VLLM_CPU_KVCACHE_SPACE` gets the capture engines' default when unset
(pipeline.vllm_engine_kw): a CPU build otherwise reserves a share of RAM sized for a real
model; GPU builds ignore the variable.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.config_types import PipelineConfig
from pipeline.errors import PipelineError
from pipeline.manifest import stage_dir
from pipeline.progress import emit
from pipeline.stages import TRAIN
from pipeline.vllm_engine_kw import with_cpu_kv_cache

# The OpenAI server as a module of the box's python (the console names the python, not a script
# on PATH). Not `vllm.entrypoints.cli.main serve`: it asks importlib.metadata for the
# distribution "vllm", which vLLM's CPU builds (distribution vllm-cpu) lack, and dies at start.
# This module is deprecated in 0.32 (a warning) but serves every version from 0.11 to 0.33.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def speculative_config(cfg: PipelineConfig) -> dict[str, Any]:
    """train's serving JSON, checked: the checkpoint it names must be there."""
    path = stage_dir(cfg, TRAIN) / "speculative_config.json"
    if not path.is_file():
        raise PipelineError(f"no {path}: run the pipeline through train first "
                            "(the server takes the head train wrote)")
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise PipelineError(f"{path}: not JSON ({exc})") from None
    if not isinstance(spec, dict) or "model" not in spec or "method" not in spec:
        raise PipelineError(f"{path}: expected an object with method and model")
    head = Path(str(spec["model"]))
    if not (head / "config.json").is_file():
        raise PipelineError(f"{path} names the head {head}, which has no config.json: "
                            "re-run train")
    return spec


# The drafts a server can be given besides a head directory (remote/serving/roles.py keeps the
# console's copy: the console does not import the pipeline's box side for its --help).
DRAFTS = ("pipeline", "none", "ngram")
# vLLM's prompt lookup: defaults of 5/5 when unset (vllm/config/speculative.py, 0.32); 1..3 is
# what served on this machine kind's CPU build (docs/design.md, Serving any draft).
NGRAM_LOOKUP = {"prompt_lookup_min": 1, "prompt_lookup_max": 3}
NGRAM_K = 3


def head_tokens(head: Path) -> int | None:
    """num_speculative_tokens a speculators-format head carries (speculators_config.
    proposal_methods[0].speculative_tokens, what vLLM itself reads), None otherwise."""
    try:
        conf = json.loads((head / "config.json").read_text(encoding="utf-8"))
        k = conf["speculators_config"]["proposal_methods"][0]["speculative_tokens"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return k if isinstance(k, int) and not isinstance(k, bool) and k >= 1 else None


def _train_k(cfg: PipelineConfig) -> int:
    path = stage_dir(cfg, TRAIN) / "speculative_config.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        k = json.loads(path.read_text(encoding="utf-8"))["num_speculative_tokens"]
        if isinstance(k, int) and k >= 1:
            return k
    return cfg.evaluate.num_speculative_tokens


def draft_config(cfg: PipelineConfig, draft: str = "pipeline",
                 k: int | None = None) -> dict[str, Any] | None:
    """The --speculative-config for `draft` with K = `k` (None: the draft's own), or None for
    no speculation. PipelineError (one line) for a draft that cannot be served as asked."""
    if k is not None and k < 1:
        raise PipelineError(f"--k {k}: num_speculative_tokens must be >= 1")
    if draft == "none":
        if k is not None:
            raise PipelineError(f"--k {k} with --draft none: the target alone drafts nothing")
        return None
    if draft == "pipeline":
        spec = dict(speculative_config(cfg))
        if k is not None:
            spec["num_speculative_tokens"] = k
        return spec
    if draft == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k or NGRAM_K, **NGRAM_LOOKUP}
    head = Path(draft).expanduser()
    if not head.is_dir():
        raise PipelineError(f"--draft {draft}: no such head directory (expected pipeline, "
                            "none, ngram or a head directory on this box)")
    if not (head / "config.json").is_file():
        raise PipelineError(f"--draft {draft}: the head directory has no config.json")
    return {"method": "eagle3", "model": str(head.resolve()),
            "num_speculative_tokens": k or head_tokens(head) or _train_k(cfg),
            "draft_tensor_parallel_size": cfg.evaluate.draft_tensor_parallel_size}


def server_argv(cfg: PipelineConfig, *, host: str, port: int, baseline: bool,
                extra: Sequence[str] = (), python: str | None = None,
                draft: str = "pipeline", k: int | None = None) -> list[str]:
    argv = [python or sys.executable, "-m", SERVER_MODULE, "--model", str(cfg.model_path),
            "--host", host, "--port", str(port)]
    if cfg.target.trust_remote_code:  # the same trust the pipeline's own loads were given
        argv.append("--trust-remote-code")
    if baseline and (draft not in ("none", "pipeline") or k is not None):
        raise PipelineError(f"--baseline serves the target alone: not with --draft {draft}"
                            + (f" --k {k}" if k is not None else ""))
    spec = None if baseline else draft_config(cfg, draft, k)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return [*argv, *extra]


def server_env() -> dict[str, str]:
    return with_cpu_kv_cache(os.environ)


def main(cfg: PipelineConfig, *, host: str, port: int, baseline: bool,
         extra: Sequence[str], draft: str = "pipeline", k: int | None = None) -> int:
    argv = server_argv(cfg, host=host, port=port, baseline=baseline, extra=extra, draft=draft,
                       k=k)
    role = "baseline" if baseline else "speculative"
    emit("info", "serve", message=f"{role} server on {host}:{port}: {' '.join(argv[1:])}",
         role=role, host=host, port=port, argv=argv, draft="none" if baseline else draft)
    env = server_env()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)
    return 0  # not reached
