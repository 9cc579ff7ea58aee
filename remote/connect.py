"""Turn a HostConfig into a ready Transport: SSH or local, wrapped for the container."""

from __future__ import annotations

from remote.bus import EventBus
from remote.container import ContainerTransport
from remote.hosts import HostConfig
from remote.transport import LocalTransport, Transport


def make_transport(host: HostConfig, bus: EventBus | None = None, **ssh_kwargs: object) -> Transport:
    inner: Transport
    if host.is_local:
        inner = LocalTransport(host.name)
    else:
        from remote.ssh import SSHTransport  # asyncssh import only when needed

        inner = SSHTransport(host, bus=bus, **ssh_kwargs)  # type: ignore[arg-type]
    if host.runtime != "none" and host.container:
        return ContainerTransport(inner, host.runtime, host.container)
    return inner
