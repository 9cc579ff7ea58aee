"""A directory standing for the container's site-packages, built from the real wheels.

speculators 0.3.0 (whole package, as pip would install it) and, from vLLM 0.16.0, only what the
patcher reads: `vllm/config/scheduler.py` and the dist-info metadata.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from tests.wheels import unpacked

WORKER = "speculators/data_generation/custom_worker.py"
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wheel_file(rel: str) -> Path:
    return unpacked("speculators", "0.3.0") / rel


def make_site_packages(root: Path, *, vllm: bool = True) -> Path:
    sp = root / "site-packages"
    ignore = shutil.ignore_patterns(".complete", "__pycache__")
    shutil.copytree(unpacked("speculators", "0.3.0"), sp, ignore=ignore)
    if vllm:
        src = unpacked("vllm", "0.16.0", ["vllm/config/scheduler.py",
                                          "vllm-0.16.0.dist-info/METADATA"])
        shutil.copytree(src, sp, ignore=ignore, dirs_exist_ok=True)
    return sp
