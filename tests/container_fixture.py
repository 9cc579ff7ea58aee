"""The session's real container (podman, scripts/box_container.py): the deployed container of a
box, on this machine. One per test session (a start costs about a second; the box environments
are inside it, at the host's paths), removed at the end with any patch record it left.

Missing podman FAILS the tests that use it (`make test` installs it through
scripts/ensure-tools.sh), never skips them.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "box_container.py"
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]
DOCKER_BIN = "/usr/bin/docker"  # podman-docker's; /usr/local/bin/docker may be a bare client
RECORDS = Path.home() / ".eagle3-console" / "patches"


def up(name: str, env: str | None = None) -> str:
    """Start (or keep) the container; its box python (or this interpreter's path)."""
    argv = [sys.executable, str(SCRIPT), "up", name, *(["--env", env] if env else [])]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"box_container.py up {name}: {done.stderr.strip()}", pytrace=False)
    return done.stdout.strip().splitlines()[-1]


def down(name: str) -> None:
    subprocess.run([sys.executable, str(SCRIPT), "down", name], capture_output=True)
    (RECORDS / f"{name}.json").unlink(missing_ok=True)


def inside(name: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """A command in the container, as the runtime runs it (not through the console)."""
    return subprocess.run([*PODMAN, "exec", "-i", name, *argv], capture_output=True, text=True)


def container_id(name: str) -> str:
    done = subprocess.run([*PODMAN, "inspect", "--format", "{{.Id}}", name],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Box:
    """The running container `name` whose python is the vLLM 0.16 box environment's."""

    name: str
    python: str

    def toml(self, path: Path, host: str, runtime: str = "podman", *,
             ssh: dict[str, str] | None = None, **keys: str) -> Path:
        """A console.toml whose host `host` reaches this container: on this machine (no ssh)
        or through the loopback sshd (`ssh`: Sshd's alias, ssh_config, known_hosts)."""
        entries: dict[str, str] = {**(ssh or {}), "runtime": runtime, "container": self.name,
                                   "python": self.python, **keys}
        if runtime == "docker":
            entries.setdefault("runtime_bin", DOCKER_BIN)
        path.write_text(f"[hosts.{host}]\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                                      for k, v in entries.items()))
        return path

    def exists_inside(self, path: str) -> bool:
        return inside(self.name, "test", "-e", path).returncode == 0

    def read_inside(self, path: str) -> str:
        done = inside(self.name, "cat", path)
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture(scope="session")
def container_box() -> Iterator[Box]:
    name = f"eagle3-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    python = up(name, "vllm016")
    try:
        yield Box(name, python)
    finally:
        down(name)
