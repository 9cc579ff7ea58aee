"""Reaching the box's vLLM server from the laptop: an SSH local port forward to the port in the
host's `vllm_url`, so nothing on the box listens beyond loopback. For `local` the box is this
machine and the URL is used as it is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from remote.bench.client import VllmClient
from remote.errors import NoServer, UsageError
from remote.link.transport import Transport


@dataclass(frozen=True)
class VllmUrl:
    scheme: str
    host: str
    port: int
    path: str  # prefix before /v1, /metrics ("" for a server at the root)

    def with_host_port(self, host: str, port: int) -> str:
        return f"{self.scheme}://{host}:{port}{self.path}"

    def __str__(self) -> str:
        return self.with_host_port(self.host, self.port)


def parse_vllm_url(url: str) -> VllmUrl:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"vllm_url {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"vllm_url {url!r}: expected http://HOST:PORT (as seen from the box)")
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return VllmUrl(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


@asynccontextmanager
async def forwarded(transport: Transport, url: str, *,
                    is_local: bool) -> AsyncIterator[tuple[VllmUrl, str]]:
    """`url` (as seen from the box) parsed, and where this machine reaches it: the local end of
    a forward held while the block runs (`url` itself on `local`)."""
    target = parse_vllm_url(url)
    try:
        forward = await transport.forward(target.port, target.host)
    except OSError as exc:
        raise NoServer(f"cannot forward to {target} on {transport.name}: {exc}") from None
    try:
        yield target, (str(target) if is_local
                       else target.with_host_port("127.0.0.1", forward.local_port))
    finally:
        await forward.close()


@asynccontextmanager
async def vllm_client(transport: Transport, url: str, *, is_local: bool,
                      timeout: float = 600.0) -> AsyncIterator[VllmClient]:
    """A client for the server at `url` on the box, through a forward held while it is open."""
    async with forwarded(transport, url, is_local=is_local) as (target, local_url), \
            VllmClient(local_url, shown_url=str(target), timeout=timeout) as client:
        yield client
