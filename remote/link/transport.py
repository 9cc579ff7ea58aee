"""The one interface through which the console touches a box.

`local` runs on this machine; the SSH transport (asyncssh, one connection per host) and the
container wrapper implement the same methods, so jobs, probes, the patcher, stats and bench are
written once and tested against all of them.
"""

from __future__ import annotations

import abc
import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from remote.errors import RemoteCommandError
from remote.link import aio
from remote.link.argv import with_env
from remote.link.streams import MergedStreams

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


@dataclass(frozen=True, slots=True)
class CompletedRun:
    argv: list[str]
    returncode: int  # negative: killed by that signal
    stdout: str
    stderr: str

    def check(self) -> CompletedRun:
        if self.returncode != 0:
            raise RemoteCommandError(self.argv, self.returncode, self.stderr)
        return self


@dataclass(frozen=True, slots=True)
class OutputLine:
    stream: str  # "stdout" | "stderr"
    text: str  # without the trailing newline


class RemoteProcess(abc.ABC):
    """A running command. Closing it does not kill the process on the far side (sshd does not
    forward signals to root sessions): long work is launched detached through remote.jobs.client."""

    async def lines(self) -> AsyncIterator[OutputLine]:
        """stdout and stderr lines interleaved in arrival order; ends when both close."""
        bufs = {"stdout": bytearray(), "stderr": bytearray()}
        async for stream, data in self.chunks():
            buf = bufs[stream]
            buf += data
            cut = buf.rfind(b"\n") + 1
            if cut:
                for raw in bytes(buf[: cut - 1]).split(b"\n"):
                    yield OutputLine(stream, raw.decode("utf-8", "replace"))
                del buf[:cut]
        for stream, buf in bufs.items():
            if buf:
                yield OutputLine(stream, bytes(buf).decode("utf-8", "replace"))

    @abc.abstractmethod
    def chunks(self) -> AsyncIterator[tuple[str, bytes]]:
        """(stream, raw bytes) in arrival order, ends when both streams close.

        Byte-exact (no decoding, newlines kept): what a log tail needs to count offsets, and
        far cheaper than one object per line."""

    @abc.abstractmethod
    async def wait(self) -> int: ...

    @abc.abstractmethod
    async def write(self, data: bytes) -> None: ...

    @abc.abstractmethod
    async def close_stdin(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the channel/pipes; does not promise the process is gone."""


@dataclass(slots=True)
class Forward:
    """A local TCP port that reaches a port on the box."""

    local_port: int
    remote_host: str
    remote_port: int
    _closer: Callable[[], object] | None = None

    async def close(self) -> None:
        if self._closer is not None:
            result = self._closer()
            if asyncio.iscoroutine(result):
                await result
            self._closer = None


class Transport(abc.ABC):
    name: str

    @abc.abstractmethod
    async def connect(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @property
    @abc.abstractmethod
    def connected(self) -> bool: ...

    @abc.abstractmethod
    async def start(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess: ...

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        check: bool = False,
    ) -> CompletedRun:
        proc = await self.start(argv, env=env)
        try:
            try:
                if input is not None:
                    await proc.write(input.encode() if isinstance(input, str) else input)
                await proc.close_stdin()
            except (BrokenPipeError, ConnectionResetError):
                pass  # it exited without reading its input: its status and output still count

            async def collect() -> tuple[list[str], list[str], int]:
                out: list[str] = []
                err: list[str] = []
                async for line in proc.lines():
                    (out if line.stream == "stdout" else err).append(line.text)
                return out, err, await proc.wait()

            out, err, rc = await aio.wait_for(collect(), timeout)
        finally:
            await proc.close()
        done = CompletedRun(list(argv), rc, _join(out), _join(err))
        return done.check() if check else done

    @abc.abstractmethod
    async def put(self, local: Path, remote: str, progress: Progress | None = None) -> None: ...

    @abc.abstractmethod
    async def get(self, remote: str, local: Path, progress: Progress | None = None) -> None: ...

    @abc.abstractmethod
    async def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> Forward: ...

    async def __aenter__(self) -> Transport:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _join(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


class _LocalProcess(RemoteProcess):
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc

    def chunks(self) -> AsyncIterator[tuple[str, bytes]]:
        """stdout and stderr read concurrently, items in arrival order, until both close."""
        out, err = self._proc.stdout, self._proc.stderr
        return MergedStreams({"stdout": (lambda: out.read(1 << 18)) if out is not None else None,
                              "stderr": (lambda: err.read(1 << 18)) if err is not None else None})

    async def wait(self) -> int:
        return await self._proc.wait()

    async def write(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(data)
        await self._proc.stdin.drain()

    async def close_stdin(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()

    async def close(self) -> None:
        await self.close_stdin()


class LocalTransport(Transport):
    """The built-in `local` host: the same interface, no SSH. Paths are this machine's."""

    def __init__(self, name: str = "local") -> None:
        self.name = name
        self._connected = False
        self._procs: set[asyncio.subprocess.Process] = set()

    async def connect(self) -> None:
        self._connected = True

    async def close(self) -> None:
        """Like closing an SSH connection: every process started here loses its stdin (the
        console's long-lived helpers exit on EOF); one that lingers is killed. Detached jobs
        are not ours to end: they run in their own session with stdin from /dev/null."""
        self._connected = False
        procs, self._procs = [p for p in self._procs if p.returncode is None], set()
        for proc in procs:
            if proc.stdin is not None and not proc.stdin.is_closing():
                proc.stdin.close()
        for proc in procs:
            try:
                await aio.wait_for(proc.wait(), 2.0)
            except TimeoutError:
                with suppress(ProcessLookupError):
                    proc.kill()
                # wait() also waits for its pipes, which a grandchild may still hold: bounded.
                with suppress(TimeoutError):
                    await aio.wait_for(proc.wait(), 2.0)

    @property
    def connected(self) -> bool:
        return self._connected

    async def start(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        full = with_env(argv, env)
        proc = await asyncio.create_subprocess_exec(
            *full,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=16 * 1024 * 1024,
        )
        self._procs = {p for p in self._procs if p.returncode is None}
        self._procs.add(proc)
        return _LocalProcess(proc)

    async def put(self, local: Path, remote: str, progress: Progress | None = None) -> None:
        size = await asyncio.to_thread(_copy_atomic, Path(local), Path(os.path.expanduser(remote)))
        if progress:
            progress(size, size)

    async def get(self, remote: str, local: Path, progress: Progress | None = None) -> None:
        size = await asyncio.to_thread(_copy_atomic, Path(os.path.expanduser(remote)), Path(local))
        if progress:
            progress(size, size)

    async def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> Forward:
        # The box is this machine: its port is already reachable.
        return Forward(local_port=remote_port, remote_host=remote_host, remote_port=remote_port)


def _copy_atomic(src: Path, dest: Path) -> int:
    size = src.stat().st_size
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)
    return size
