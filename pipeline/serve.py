"""serve: vLLM's OpenAI server for the pipeline's target, with the head train wrote or without.

`python -m pipeline serve --config FILE --port P [--baseline] [-- VLLM_ARGS...]` runs on the
box as a detached job (the console's `serve` step). It reads the pipeline's own output, never a
hand-written copy: the target is `target.model` and the speculative config is
`<output_dir>/train/speculative_config.json`, the JSON train wrote next to the checkpoint, so
the head is served with the layer ids and token count it was trained and evaluated with.
`--baseline` serves the same target without speculation, for the speedup's denominator.

The process replaces itself with the server (os.execv): the job's pid and process group are
vLLM's, so cancelling the job ends the API server and its engine processes together, and the
job's exit status is vLLM's own.

`VLLM_CPU_KVCACHE_SPACE` gets the capture engines' default when unset
(pipeline.vllm_engine_kw): a CPU build otherwise reserves a share of RAM sized for a real
model; GPU builds ignore the variable.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.errors import PipelineError
from pipeline.manifest import stage_dir
from pipeline.progress import emit
from pipeline.vllm_engine_kw import with_cpu_kv_cache

# The OpenAI server as a module of the box's python (the console names the python, not a script
# on PATH). Not `vllm.entrypoints.cli.main serve`: it asks importlib.metadata for the
# distribution "vllm", which vLLM's CPU builds (distribution vllm-cpu) lack, and dies at start.
# This module is deprecated in 0.32 (a warning) but serves every version from 0.11 to 0.33.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def speculative_config(cfg: PipelineConfig) -> dict[str, Any]:
    """train's serving JSON, checked: the checkpoint it names must be there."""
    path = stage_dir(cfg, "train") / "speculative_config.json"
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


def server_argv(cfg: PipelineConfig, *, host: str, port: int, baseline: bool,
                extra: Sequence[str] = (), python: str | None = None) -> list[str]:
    argv = [python or sys.executable, "-m", SERVER_MODULE, "--model", str(cfg.model_path),
            "--host", host, "--port", str(port)]
    if cfg.target.trust_remote_code:  # the same trust the pipeline's own loads were given
        argv.append("--trust-remote-code")
    if not baseline:
        argv += ["--speculative-config",
                 json.dumps(speculative_config(cfg), separators=(",", ":"))]
    return [*argv, *extra]


def server_env() -> dict[str, str]:
    return with_cpu_kv_cache(os.environ)


def main(cfg: PipelineConfig, *, host: str, port: int, baseline: bool,
         extra: Sequence[str]) -> int:
    argv = server_argv(cfg, host=host, port=port, baseline=baseline, extra=extra)
    role = "baseline" if baseline else "speculative"
    emit("info", "serve", message=f"{role} server on {host}:{port}: {' '.join(argv[1:])}",
         role=role, host=host, port=port, argv=argv)
    env = server_env()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)
    return 0  # not reached
