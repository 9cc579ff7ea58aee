"""Where and how the SSH transport connects: asyncssh's connect options from a host's
config (user@host:port, identity file, ssh config), the ProxyJump hops an ssh config names, and
SFTP's view of a remote path."""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from typing import Any

from remote.errors import ConfigError
from remote.link.hosts import HostConfig

# the options a jump host inherits from the box's own
_HOP_OPTIONS = ("known_hosts", "keepalive_interval", "keepalive_count_max", "connect_timeout",
                "config")


def connect_options(host: HostConfig, known_hosts: Path, keepalive_interval: float,
                    connect_timeout: float) -> tuple[str, dict[str, Any]]:
    """The target host name and asyncssh.connect's keyword arguments for a host."""
    target = host.ssh or ""
    opts = host.ssh_options
    kwargs: dict[str, Any] = {
        "known_hosts": str(known_hosts) if known_hosts.exists() else [],
        "keepalive_interval": keepalive_interval,
        "keepalive_count_max": 3,
        "connect_timeout": connect_timeout,
    }
    user = opts.get("user")
    if "@" in target:
        user_part, target = target.rsplit("@", 1)
        user = user or user_part
    if ":" in target and not target.startswith("["):
        host_part, _, port_part = target.rpartition(":")
        if port_part.isdigit():
            target = host_part
            kwargs["port"] = int(port_part)
    if user:
        kwargs["username"] = str(user)
    if opts.get("port"):
        kwargs["port"] = int(opts["port"])
    for key, kwarg, what in (("identity_file", "client_keys", "identity file"),
                             ("ssh_config", "config", "ssh config file")):
        if opts.get(key):
            path = os.path.expanduser(str(opts[key]))
            if not os.path.isfile(path):  # a config error (exit 2), not a failed connect
                raise ConfigError(host.source, f"hosts.{host.name}.{key}", f"{what} {path} not found")
            kwargs[kwarg] = [path]
    return target, kwargs


def hop_options(hop: str, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A ProxyJump hop ([user@]name[:port]) as a target and its connect options: the box's
    known_hosts, keepalive, timeout and ssh config, so each hop is checked like the box."""
    user, _, rest = hop.rpartition("@")
    name, _, port = rest.partition(":")
    hop_kwargs = {k: v for k, v in kwargs.items() if k in _HOP_OPTIONS}
    if user:
        hop_kwargs["username"] = user
    if port.isdigit():
        hop_kwargs["port"] = int(port)
    return name, hop_kwargs


def proxy_jump(target: str, kwargs: dict[str, Any]) -> list[str]:
    """The ProxyJump hops the ssh config names for target ([] when none or unreadable)."""
    paths = kwargs.get("config")
    if not paths:
        default = Path("~/.ssh/config").expanduser()
        paths = [str(default)] if default.is_file() else []
    if not paths:
        return []
    try:
        from asyncssh.config import SSHClientConfig

        config = SSHClientConfig.load(None, paths, False, False, False, getpass.getuser(),
                                      kwargs.get("username", ()), target,
                                      kwargs.get("port", ()))
        jump = config.get("ProxyJump")
    except Exception:  # an asyncssh without this internal API: it applies ProxyJump itself
        return []
    if not isinstance(jump, str) or jump.lower() == "none":
        return []
    return [hop.strip() for hop in jump.split(",") if hop.strip()]


def sftp_path(remote: str) -> str:
    """SFTP resolves relative paths against the login directory: that is what `~/` means."""
    if remote == "~":
        return "."
    if remote.startswith("~/"):
        return remote[2:]
    return remote

