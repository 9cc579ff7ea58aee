"""Commands and file copies that go into the deployed container on the box.

The operator's ML stack (vLLM, speculators, torch) lives in a container; the console reaches it
with `<runtime> exec -i NAME argv...` and `<runtime> cp`. With runtime `none` the box's own
environment is used and this layer disappears.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from remote.errors import ContainerConfigError, ContainerError
from remote.link.container_identity import ContainerIdentity, identity_from_inspect
from remote.link.transport import Forward, Progress, RemoteProcess, Transport

RUNTIMES = ("docker", "podman")


def exec_argv(
    runtime: str,
    container: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    binary: str | None = None,
) -> list[str]:
    if runtime not in RUNTIMES:
        raise ContainerConfigError(f"unknown container runtime {runtime!r} (use docker, podman or none)")
    _check_name(container)
    out = [binary or runtime, "exec", "-i"]
    for key, value in (env or {}).items():
        out += ["-e", f"{key}={value}"]
    # `--` is not understood by `docker exec`; the container name is the first positional.
    return [*out, container, *argv]


def _check_name(container: str) -> None:
    """Names travel verbatim (quoted once); only what would change the command is refused."""
    if not container:
        raise ContainerConfigError("no container name given")
    if container.startswith("-"):
        raise ContainerConfigError(f"container name {container!r} starts with '-' (it would be read "
                             "as an option)")
    if ":" in container or "\x00" in container:
        raise ContainerConfigError(f"container name {container!r} contains ':' or NUL")


def _host_path(path: str) -> str:
    # `docker cp` reads `NAME:PATH` as a container path and `-x` as an option.
    if ":" in path.split("/", 1)[0] or path.startswith("-"):
        return "./" + path
    return path


def cp_into_argv(runtime: str, container: str, host_path: str, container_path: str) -> list[str]:
    """`runtime` here is the binary to run (the runtime's name or its configured path)."""
    _check_name(container)
    return [runtime, "cp", _host_path(host_path), f"{container}:{container_path}"]


def cp_out_argv(runtime: str, container: str, container_path: str, host_path: str) -> list[str]:
    _check_name(container)
    return [runtime, "cp", f"{container}:{container_path}", _host_path(host_path)]


class ContainerTransport(Transport):
    """Wraps the host transport so every command and file lands inside the container."""

    def __init__(self, inner: Transport, runtime: str, container: str,
                 binary: str | None = None) -> None:
        if runtime not in RUNTIMES:
            raise ContainerConfigError(f"unknown container runtime {runtime!r} (use docker, podman or none)")
        _check_name(container)
        self.inner = inner
        self.runtime = runtime
        self.binary = binary or runtime  # what runs on the box: a name on PATH or a path
        self.container = container
        self.name = inner.name
        self.identity: ContainerIdentity | None = None

    async def connect(self) -> None:
        await self.inner.connect()
        await self.check()

    async def check(self) -> None:
        """Fail early, naming what is missing: the runtime binary or the container. Reads
        (never writes) on the box, so a refused host is left exactly as it was."""
        which = await self.inner.run(["sh", "-c", 'command -v "$1"', "sh", self.binary])
        if which.returncode != 0:
            what = self.runtime if self.binary == self.runtime else f"{self.runtime} ({self.binary})"
            raise ContainerError(f"container runtime {what} not found on {self.name}")
        state = await self.inner.run([self.binary, "inspect", "--type", "container",
                                      self.container])
        if state.returncode != 0:
            err = state.stderr.strip().splitlines()
            raise ContainerError(
                f"container {self.container!r} not found on {self.name} ({self.runtime} inspect: "
                f"{err[-1] if err else 'no output'})"
            )
        self.identity = identity_from_inspect(state.stdout, self.container)
        if not self.identity.running:
            raise ContainerError(f"container {self.container!r} on {self.name} is not running "
                                 f"({self.identity.status}; start it, or recreate it)")

    async def close(self) -> None:
        await self.inner.close()

    @property
    def connected(self) -> bool:
        return self.inner.connected

    async def start(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        return await self.inner.start(exec_argv(self.runtime, self.container, argv, env=env,
                                                binary=self.binary))

    async def _host_tmp(self) -> str:
        return posixpath.join("/tmp", f"eagle3-console-{uuid.uuid4().hex}")

    async def put(self, local: Path, remote: str, progress: Progress | None = None) -> None:
        tmp = await self._host_tmp()
        await self.inner.put(local, tmp, progress)
        try:
            parent = posixpath.dirname(remote) or "."
            await self.run(["mkdir", "-p", parent], check=True)
            await self.inner.run(cp_into_argv(self.binary, self.container, tmp, remote), check=True)
        finally:
            await self.inner.run(["rm", "-f", tmp])

    async def get(self, remote: str, local: Path, progress: Progress | None = None) -> None:
        tmp = await self._host_tmp()
        try:
            await self.inner.run(cp_out_argv(self.binary, self.container, remote, tmp), check=True)
            await self.inner.get(tmp, local, progress)
        finally:
            await self.inner.run(["rm", "-f", tmp])

    async def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> Forward:
        # vLLM in the container publishes its port on the host (host networking or -p).
        return await self.inner.forward(remote_port, remote_host)
