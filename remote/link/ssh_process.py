"""One command over the SSH transport's connection: its merged output, exit code and stdin,
with a dropped connection raised as one line (ConnectionFailed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import suppress

import asyncssh

from remote.errors import ConnectionFailed
from remote.link.streams import MergedStreams
from remote.link.transport import RemoteProcess

# what a dropped connection raises, from asyncssh or the socket under it
LOST = (asyncssh.ConnectionLost, asyncssh.DisconnectError, asyncssh.ChannelOpenError,
        BrokenPipeError, ConnectionError, OSError, EOFError)


class SSHProcess(RemoteProcess):
    def __init__(self, proc: asyncssh.SSHClientProcess[bytes], host: str) -> None:
        self._proc = proc
        self._host = host

    async def chunks(self) -> AsyncIterator[tuple[str, bytes]]:
        out, err = self._proc.stdout, self._proc.stderr
        merged = MergedStreams({"stdout": lambda: out.read(1 << 18),
                                "stderr": lambda: err.read(1 << 18)}, lost=LOST)
        try:
            async for item in merged:
                yield item
        except LOST as exc:
            raise ConnectionFailed(f"connection to {self._host} lost: "
                                   f"{one_line(exc)}") from None
        finally:
            await merged.aclose()

    async def wait(self) -> int:
        try:
            done = await self._proc.wait()
        except LOST as exc:
            raise ConnectionFailed(f"connection to {self._host} lost: {one_line(exc)}") from None
        if done.returncode is None:
            raise ConnectionFailed(f"connection to {self._host} lost before the command ended")
        return int(done.returncode)

    async def write(self, data: bytes) -> None:
        try:
            self._proc.stdin.write(data)
            await self._proc.stdin.drain()
        except LOST as exc:
            raise ConnectionFailed(f"connection to {self._host} lost: {one_line(exc)}") from None

    async def close_stdin(self) -> None:
        with suppress(*LOST):
            self._proc.stdin.write_eof()

    async def close(self) -> None:
        self._proc.close()


def one_line(exc: BaseException) -> str:
    text = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())
