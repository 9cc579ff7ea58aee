"""The real box environments for tests (vLLM CPU builds + speculators), from scripts/box_env.py.

A missing or broken environment fails the test that needs it: `ensure` builds it (minutes, once,
cached outside git) or raises with the failing command's output; it never skips.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_SCRIPT = REPO / "scripts" / "box_env.py"
_spec = importlib.util.spec_from_file_location("box_env_script", _SCRIPT)
assert _spec is not None and _spec.loader is not None
box_env = importlib.util.module_from_spec(_spec)
# dataclasses look their module up in sys.modules while the class body runs
sys.modules.setdefault(_spec.name, box_env)
_spec.loader.exec_module(box_env)


def ensure(stack: str = "vllm032") -> Path:
    """The stack's python; building it if needed. SystemExit from the builder becomes a failure."""
    try:
        return Path(box_env.ensure(stack, quiet=True))
    except SystemExit as exc:
        raise RuntimeError(f"box environment {stack!r} cannot be built: {exc}") from None


def run_env(*front: Path, tp: int = 1, **extra: str) -> dict[str, str]:
    """The environment a box-side process (the pipeline, a vLLM engine) runs under in the
    tests: this checkout's packages importable (after `front`), vLLM's CPU KV cache at 1 GiB
    (its default claims a share of the machine's memory), progress bars and vLLM's info logs
    off; with tp=2, one core per worker (docs/design.md: TP 2 on CPU)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, front), str(REPO)]),
           "VLLM_CPU_KVCACHE_SPACE": "1", "TQDM_DISABLE": "1", "VLLM_LOGGING_LEVEL": "WARNING",
           **extra}
    if tp == 2:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0|1"
    return env
