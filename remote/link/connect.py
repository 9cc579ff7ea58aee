"""Turn a HostConfig into a ready Transport: SSH or local, wrapped for the container."""

from __future__ import annotations

from remote.link.container import ContainerTransport
from remote.link.hosts import HostConfig
from remote.link.transport import LocalTransport, Transport
from remote.spine.bus import EventBus


def make_transport(host: HostConfig, bus: EventBus | None = None, **ssh_kwargs: object) -> Transport:
    inner: Transport
    if host.is_local:
        inner = LocalTransport(host.name)
    else:
        from remote.link.ssh import SSHTransport  # asyncssh import only when needed

        inner = SSHTransport(host, bus=bus, **ssh_kwargs)  # type: ignore[arg-type]
    if host.runtime != "none" and host.container:
        return ContainerTransport(inner, host.runtime, host.container, host.runtime_bin)
    return inner
