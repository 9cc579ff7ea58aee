"""The real box environments for tests (vLLM CPU builds + speculators), from scripts/box_env.py.

A missing or broken environment fails the test that needs it: `ensure` builds it (minutes, once,
cached outside git) or raises with the failing command's output; it never skips.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "box_env.py"
_spec = importlib.util.spec_from_file_location("box_env_script", _SCRIPT)
assert _spec is not None and _spec.loader is not None
box_env = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = box_env  # dataclasses look their module up while the class is built
_spec.loader.exec_module(box_env)


def ensure(stack: str = "vllm032") -> Path:
    """The stack's python; building it if needed. SystemExit from the builder becomes a failure."""
    try:
        return Path(box_env.ensure(stack, quiet=True))
    except SystemExit as exc:
        raise RuntimeError(f"box environment {stack!r} cannot be built: {exc}") from None
