"""A second Python environment with speculators 0.9.x (transformers 5.x), built once and cached
outside git: the main .venv carries speculators 0.3.0 (transformers 4.x) and the two cannot
share one environment.

torch comes from the CPU build on this machine's disk (`pip install torch==2.13.0`, seconds).
speculators 0.9.0 is installed --no-deps: its metadata pulls torchvision and torchaudio, whose
PyPI builds do not match this torch and are not imported by the training path we use, and
mooncake extras. The deps it really imports are listed here.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

SPEC_VERSION = "0.9.0"
PACKAGES = [
    "torch==2.13.0",
    "transformers>=5.0,<=5.19",
    "datasets>=4.0,<=5.1.0",
    "safetensors",
    "numpy>=2.0,<=2.5.4",
    "pydantic>=2",
    "pydantic-settings>=2",
    "loguru>=0.7.2,<=0.7.3",
    "rich",
    "tqdm",
    "typer>=0.12",
    "click",
    "huggingface-hub",
    "psutil",
    "httpx",
    "aiohttp",
    "protobuf",
    "openai>=2.0.0",
    "tokenizers",
    "jinja2",
    "accelerate",
]


def cache_root() -> Path:
    default = Path.home() / ".cache" / "eagle3-console-tests"
    root = Path(os.environ.get("EAGLE3_TEST_CACHE", default))
    root.mkdir(parents=True, exist_ok=True)
    return root


def venv_dir() -> Path:
    return cache_root() / f"venv-spec{SPEC_VERSION.replace('.', '')}"


def python() -> Path:
    return venv_dir() / "bin" / "python"


def ensure() -> Path:
    """The venv's python, building it on first use (a few minutes, then cached)."""
    done = venv_dir() / ".complete"
    if done.exists():
        return python()
    lock = cache_root() / ".venv-spec09.lock"
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if done.exists():
            return python()
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv_dir())], check=True)
        pip = [str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *PACKAGES], check=True)
        subprocess.run([*pip, "--no-deps", f"speculators=={SPEC_VERSION}",
                        f"hs-connectors=={SPEC_VERSION}"], check=True)
        done.write_text("ok\n")
    return python()


if __name__ == "__main__":
    print(ensure())
