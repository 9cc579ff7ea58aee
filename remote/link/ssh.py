"""The SSH transport: one asyncssh connection per host, reused for every command, stream, copy
and forward, re-established with backoff when the network drops.

Host keys are always checked against known_hosts. An unknown key is refused with its fingerprint
and the flag that trusts it; a changed key is refused even with that flag (possible
man-in-the-middle). Errors reach the operator as one line with exit code 3.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import asyncssh

from remote.errors import AuthFailed, ConfigError, ConnectionFailed, HostKeyError
from remote.link import aio
from remote.link.argv import shell_join, with_env
from remote.link.hosts import HostConfig
from remote.link.ssh_keys import (
    HostKeyCheck,
    KeyTypeProbe,
    ca_only_error,
    has_ca_lines,
    host_key_error,
    key_type_error,
    revoked_server_key,
)
from remote.link.ssh_options import connect_options, hop_options, proxy_jump, sftp_path
from remote.link.ssh_process import LOST, SSHProcess, one_line
from remote.link.transport import Forward, Progress, RemoteProcess, Transport
from remote.spine import events as ev
from remote.spine.bus import EventBus

DEFAULT_KEEPALIVE = 15.0
DEFAULT_CONNECT_TIMEOUT = 15.0


class _Client(asyncssh.SSHClient):
    def __init__(self, owner: SSHTransport, check: HostKeyCheck) -> None:
        self._owner = owner
        self._check = check

    def validate_host_public_key(self, host: str, addr: str, port: int,
                                 key: asyncssh.SSHKey) -> bool:
        return self._check(host, addr, port, key)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._on_lost(self, exc)


class SSHTransport(Transport):
    def __init__(
        self,
        host: HostConfig,
        *,
        bus: EventBus | None = None,
        accept_new_host_key: bool | str = False,
        reconnect_attempts: int | None = None,
        backoff_base: float = 0.2,
        backoff_cap: float = 30.0,
    ) -> None:
        if host.ssh is None:
            raise ConfigError(host.source, f"hosts.{host.name}.ssh", "no SSH target for this host")
        self.host = host
        self.name = host.name
        self.bus = bus
        self.accept_new_host_key = accept_new_host_key
        self.reconnect_attempts = reconnect_attempts  # None: keep trying (the laptop may sleep)
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        opts = host.ssh_options
        self.known_hosts = Path(os.path.expanduser(
            str(opts.get("known_hosts") or "~/.ssh/known_hosts")))
        self.keepalive_interval = float(opts.get("keepalive_interval", DEFAULT_KEEPALIVE))
        self.connect_timeout = float(opts.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT))
        self._conn: asyncssh.SSHClientConnection | None = None
        self._closing = False
        self._ever_up = False
        self._lock = asyncio.Lock()
        self._forwards: list[Forward] = []
        self._listeners: dict[int, asyncssh.SSHListener] = {}
        self.reconnects = 0

    # -- connection -------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def _emit(self, kind: str, **payload: object) -> None:
        if self.bus is not None and not self.bus.closed:
            self.bus.emit(kind, self.name, **payload)

    async def _open(self) -> asyncssh.SSHClientConnection:
        target, kwargs = connect_options(self.host, self.known_hosts, self.keepalive_interval,
                                         self.connect_timeout)
        jumps = proxy_jump(target, kwargs)
        tunnel: asyncssh.SSHClientConnection | None = None
        try:
            for hop in jumps:  # each hop is checked like the box itself
                name, hop_kwargs = hop_options(hop, kwargs)
                if tunnel is not None:
                    hop_kwargs["tunnel"] = tunnel
                hop_conn = await self._open_one(name, hop_kwargs, f"jump host {name}")
                if tunnel is not None:
                    hop_conn.set_tunnel(tunnel)  # closing the last hop closes the chain
                tunnel = hop_conn
            if tunnel is not None:
                kwargs["tunnel"] = tunnel  # also stops asyncssh applying ProxyJump itself
            conn = await self._open_one(target, kwargs, f"{self.name} ({target})")
        except BaseException:
            if tunnel is not None:
                tunnel.close()
            raise
        if tunnel is not None:
            conn.set_tunnel(tunnel)
        return conn

    async def _open_one(self, target: str, kwargs: dict[str, Any],
                        box: str) -> asyncssh.SSHClientConnection:
        check = HostKeyCheck(self.known_hosts, self.accept_new_host_key)
        try:
            conn = await aio.wait_for(
                asyncssh.connect(target, client_factory=lambda: _Client(self, check), **kwargs),
                self.connect_timeout + 5,
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            if check.verdict is None and "revoked" in str(exc):
                # asyncssh refused it before asking us (a revoked key or CA key it matched
                # itself): learn the offered key's fingerprint for the one line.
                check.verdict = "revoked"
                check.revoked_ca = "CA key is revoked" in str(exc)
                check.fingerprint = (await self._probe(target, kwargs)).fingerprint
            raise host_key_error(check, box, self.known_hosts) from None
        except asyncssh.PermissionDenied as exc:
            raise AuthFailed(f"authentication to {box} failed as user "
                             f"{kwargs.get('username') or '(from ssh config)'}: {exc.reason}; "
                             "no offered key was accepted (agent, IdentityFile, ~/.ssh/id_*)") from None
        except asyncssh.DisconnectError as exc:
            if check.verdict in ("unknown", "changed", "revoked"):
                raise host_key_error(check, box, self.known_hosts) from None
            await self._key_type_changed(target, kwargs, box, check)
            raise ConnectionFailed(f"{box} closed the connection: {one_line(exc)}") from None
        except TimeoutError:
            raise ConnectionFailed(f"cannot reach {box}: no answer within "
                                   f"{self.connect_timeout:g}s") from None
        except socket.gaierror as exc:
            raise ConnectionFailed(f"cannot reach {box}: unknown host ({exc.strerror})") from None
        except OSError as exc:
            if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
                await self._key_type_changed(target, kwargs, box, check)
            raise ConnectionFailed(f"cannot reach {box}: {exc.strerror or exc}") from None
        except (ValueError, asyncssh.KeyImportError, asyncssh.ConfigParseError) as exc:
            raise ConfigError(self.host.source, f"hosts.{self.name}", f"SSH setup: {exc}") from None
        revoked = revoked_server_key(self.known_hosts, conn, target)
        if revoked:  # trusted under another name of the box, revoked under this one
            conn.close()
            check.verdict, check.fingerprint = "revoked", revoked
            raise host_key_error(check, box, self.known_hosts)
        if check.verdict == "accepted":
            self._emit(ev.CONSOLE_WARNING, message=f"trusted new host key {check.fingerprint} for "
                       f"{check.where}, stored in {self.known_hosts}")
        return conn

    async def _probe(self, target: str, kwargs: dict[str, Any]) -> KeyTypeProbe:
        """What the server offers, seen by a handshake that allows every algorithm and trusts
        nothing (the probe refuses every key, so no connection is ever kept)."""
        probe = KeyTypeProbe(self.known_hosts, accept_new=False)
        with suppress(asyncssh.Error, OSError, TimeoutError, ValueError):
            await aio.wait_for(
                asyncssh.connect(target, client_factory=lambda: _Client(self, probe),
                                 **{**kwargs, "known_hosts": []}),
                self.connect_timeout + 5)
        return probe

    async def _key_type_changed(self, target: str, kwargs: dict[str, Any], box: str,
                                check: HostKeyCheck) -> None:
        """Raise HostKeyError when a handshake that never reached the key check failed because
        the server no longer offers any key type known_hosts holds for it (or known_hosts holds
        only @cert-authority keys for it and the server presents a plain key)."""
        if check.verdict is not None or not isinstance(kwargs.get("known_hosts"), str):
            return
        probe = await self._probe(target, kwargs)
        if probe.verdict == "changed":
            raise key_type_error(probe, box, self.known_hosts) from None
        if probe.verdict == "unknown" and probe.fingerprint and has_ca_lines(self.known_hosts):
            raise ca_only_error(probe, box, self.known_hosts) from None

    async def connect(self) -> None:
        async with self._lock:
            if self._conn is not None:
                return
            self._closing = False
            conn = await self._open()
            self._conn = conn
            self._ever_up = True
            self._emit(ev.CONNECTION_UP, attempt=0, summary=f"connected to {self.name}")

    def _on_lost(self, client: _Client, exc: Exception | None) -> None:
        if self._conn is None or self._conn.get_owner() is not client:
            return
        self._conn = None
        if not self._closing:
            self._emit(ev.CONNECTION_DOWN, error=one_line(exc) if exc else "connection closed",
                       summary=f"connection to {self.name} lost")

    async def _connection(self) -> asyncssh.SSHClientConnection:
        """The live connection, reconnecting with capped exponential backoff and jitter."""
        conn = self._conn
        if conn is not None:
            return conn
        if not self._ever_up:
            await self.connect()
            assert self._conn is not None
            return self._conn
        async with self._lock:
            if self._conn is not None:
                return self._conn
            attempt = 0
            while True:
                if self._closing:
                    raise ConnectionFailed(f"connection to {self.name} was closed")
                attempt += 1
                delay = min(self.backoff_cap, self.backoff_base * 2 ** (attempt - 1))
                delay *= random.uniform(0.5, 1.0)
                try:
                    conn = await self._open()
                except (HostKeyError, AuthFailed, ConfigError) as exc:
                    # not a network problem: retrying would not help, and must be loud -- in
                    # the session too, which would otherwise end at "reconnecting"
                    why = ("host key" if isinstance(exc, HostKeyError) else
                           "auth" if isinstance(exc, AuthFailed) else "config")
                    self._emit(ev.CONNECTION_DOWN, error=str(exc), refused=why,
                               summary=f"reconnecting to {self.name} refused ({why}): {exc}")
                    raise
                except ConnectionFailed as exc:
                    if self.reconnect_attempts is not None and attempt >= self.reconnect_attempts:
                        raise ConnectionFailed(f"{self.name}: gave up reconnecting after "
                                               f"{attempt} attempts: {exc}") from None
                    self._emit(ev.CONNECTION_RETRY, attempt=attempt, delay=round(delay, 3),
                               error=str(exc), summary=f"reconnecting to {self.name} in "
                               f"{delay:.1f}s (attempt {attempt})")
                    await asyncio.sleep(delay)
                    continue
                self._conn = conn
                self.reconnects += 1
                self._emit(ev.CONNECTION_UP, attempt=attempt,
                           summary=f"reconnected to {self.name} (attempt {attempt})")
                await self._restore_forwards(conn)
                return conn

    async def close(self) -> None:
        self._closing = True
        for fwd in list(self._forwards):
            await fwd.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with suppress(TimeoutError, *LOST):
                await aio.wait_for(conn.wait_closed(), 5)
        self._ever_up = False

    # -- commands ---------------------------------------------------------------------------

    async def start(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        command = shell_join(with_env(argv, env))
        failures = 0
        while True:
            conn = await self._connection()
            try:
                proc = await conn.create_process(command, encoding=None)
            except asyncssh.ChannelOpenError as exc:
                if self._conn is conn:  # the connection is fine; the server said no
                    raise ConnectionFailed(f"{self.name} refused a session: {exc.reason}") from None
                failures += 1
            except LOST:
                failures += 1
                if self._conn is conn:
                    self._drop(conn)
            else:
                return SSHProcess(proc, self.name)
            if failures > 50:
                raise ConnectionFailed(f"{self.name}: cannot open a session after {failures} tries")

    def _drop(self, conn: asyncssh.SSHClientConnection) -> None:
        """Forget a connection that failed under us (its connection_lost may come later)."""
        if self._conn is conn:
            self._conn = None
            self._emit(ev.CONNECTION_DOWN, error="session failed",
                       summary=f"connection to {self.name} lost")
            conn.abort()

    # -- files ------------------------------------------------------------------------------

    async def put(self, local: Path, remote: str, progress: Progress | None = None) -> None:
        path = sftp_path(remote)
        total = Path(local).stat().st_size

        def handler(_src: bytes, _dst: bytes, done: int, size: int) -> None:
            if progress:
                progress(done, size or total)

        async def op(sftp: asyncssh.SFTPClient) -> None:
            parent = os.path.dirname(path)
            if parent:
                await sftp.makedirs(parent, exist_ok=True)
            tmp = f"{path}.part-{os.getpid()}-{random.getrandbits(32):08x}"
            await sftp.put(str(local), tmp, progress_handler=handler)
            try:
                await sftp.posix_rename(tmp, path)
            except asyncssh.SFTPError:
                await sftp.rename(tmp, path, flags=0)
            if progress and total == 0:
                progress(0, 0)

        await self._sftp(op, f"upload {local} to {remote}")

    async def get(self, remote: str, local: Path, progress: Progress | None = None) -> None:
        path = sftp_path(remote)
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(local).with_name(f".{Path(local).name}.part-{os.getpid()}")

        def handler(_src: bytes, _dst: bytes, done: int, size: int) -> None:
            if progress:
                progress(done, size)

        async def op(sftp: asyncssh.SFTPClient) -> None:
            await sftp.get(path, str(tmp), progress_handler=handler)

        await self._sftp(op, f"download {remote}")
        os.replace(tmp, local)

    async def _sftp(self, op: Any, what: str) -> None:
        for attempt in range(1, 6):
            conn = await self._connection()
            try:
                async with conn.start_sftp_client() as sftp:
                    await op(sftp)
                return
            except asyncssh.SFTPError as exc:
                raise ConnectionFailed(f"{what} on {self.name} failed: {exc.reason}") from None
            except LOST:
                if self._conn is conn:
                    self._drop(conn)
                if attempt == 5:
                    raise ConnectionFailed(f"{what} on {self.name}: connection kept dropping") \
                        from None

    # -- port forwarding --------------------------------------------------------------------

    async def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> Forward:
        conn = await self._connection()
        try:
            listener = await conn.forward_local_port("127.0.0.1", 0, remote_host, remote_port)
        except (OSError, asyncssh.Error) as exc:
            raise ConnectionFailed(f"cannot forward to {remote_host}:{remote_port} on "
                                   f"{self.name}: {one_line(exc)}") from None
        fwd = Forward(local_port=listener.get_port(), remote_host=remote_host,
                      remote_port=remote_port)
        self._listeners[id(fwd)] = listener

        def closer() -> None:
            lst = self._listeners.pop(id(fwd), None)
            if lst is not None:
                lst.close()
            if fwd in self._forwards:
                self._forwards.remove(fwd)

        fwd._closer = closer
        self._forwards.append(fwd)
        return fwd

    async def _restore_forwards(self, conn: asyncssh.SSHClientConnection) -> None:
        """Re-open each forward on its old local port, so URLs handed out stay valid."""
        for fwd in list(self._forwards):
            old = self._listeners.get(id(fwd))
            if old is not None:
                old.close()
            try:
                self._listeners[id(fwd)] = await conn.forward_local_port(
                    "127.0.0.1", fwd.local_port, fwd.remote_host, fwd.remote_port)
            except (OSError, asyncssh.Error) as exc:
                self._emit(ev.CONSOLE_WARNING, message=f"port forward {fwd.local_port} -> "
                           f"{fwd.remote_host}:{fwd.remote_port} not restored: {one_line(exc)}")
