"""Host keys of the SSH transport: always checked against known_hosts.

An unknown key is refused with its fingerprint and the flag that trusts it; a changed key is
refused even with that flag (possible man-in-the-middle). A server that no longer offers any key
type known_hosts holds for it is a changed key too, not a network fault (`KeyTypeProbe`).

Markers are honoured as OpenSSH does (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT): a key on an
`@revoked` line is never accepted, never stored, whatever the flag says; an `@cert-authority`
line trusts host certificates that CA signed (asyncssh checks the certificate itself) and is not
a host key, so a plain key beside it is judged as unknown. The revoked keys are read here, not
left to asyncssh alone: asyncssh 2.24 looks a non-22 port up as `[host]:port` and, when that
finds no trusted key, again as plain `host`, dropping the `[host]:port` @revoked entries it
found on the way, so `@revoked [box]:2222 KEY` reached our accept-new callback and was stored.
Revocations under either name count here (stricter than OpenSSH, which reads only the port's
name: a key revoked for the host on its default port is not one to trust on another).
"""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh

from remote.errors import HostKeyError

ACCEPT_FLAG = "--accept-new-host-key"


def known_keys(known_hosts: Path, host: str, addr: str,
               port: int) -> tuple[list[asyncssh.SSHKey], list[asyncssh.SSHKey]]:
    """(trusted host keys, revoked keys) known_hosts holds for the host; unreadable: none."""
    try:
        text = known_hosts.read_text(encoding="utf-8", errors="replace")
        trusted = list(asyncssh.match_known_hosts(str(known_hosts), host, addr, port)[0])
    except (OSError, ValueError):
        return [], []
    return trusted, revoked_keys(text, host, addr, port)


def revoked_keys(text: str, host: str, addr: str, port: int) -> list[asyncssh.SSHKey]:
    """The keys of the `@revoked` lines whose host patterns match: each line read as a plain
    entry on its own (asyncssh's matcher, which then keeps it), one bad line skipped alone."""
    keys: list[asyncssh.SSHKey] = []
    for line in text.splitlines():
        fields = line.split(None, 1)  # spaces or tabs, as OpenSSH reads it
        if len(fields) != 2 or fields[0] != "@revoked":
            continue
        try:
            keys += asyncssh.import_known_hosts(fields[1].strip() + "\n").match(host, addr, port)[0]
        except (ValueError, asyncssh.KeyImportError):
            continue
    return keys


def revoked_server_key(known_hosts: Path, conn: asyncssh.SSHClientConnection,
                       target: str) -> str:
    """The fingerprint of the key a connection was made with when known_hosts revokes it, else
    "". asyncssh trusts a key matched under plain `host` without asking us, dropping the
    `[host]:port` revocation it found first; this looks again, after the handshake, under
    the target's name and the peer's address."""
    key = conn.get_server_host_key()
    peer = conn.get_extra_info("peername") or ("", 0)
    if key is None or not known_hosts.exists():
        return ""
    try:
        text = known_hosts.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    host = target.rsplit("@", 1)[-1]
    revoked = revoked_keys(text, host, str(peer[0]), int(peer[1]))
    return key.get_fingerprint("sha256") if is_revoked(key, revoked) else ""


def has_ca_lines(known_hosts: Path) -> bool:
    try:
        return "@cert-authority" in known_hosts.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def is_revoked(key: asyncssh.SSHKey, revoked: list[asyncssh.SSHKey]) -> bool:
    return any(r.public_data == key.public_data for r in revoked)


class HostKeyCheck:
    """Decides on a host key asyncssh could not match in known_hosts, and remembers why."""

    def __init__(self, known_hosts: Path, accept_new: bool | str) -> None:
        """accept_new: True trusts any new key (the CLI flag); a fingerprint trusts only the
        key with that fingerprint (the TUI, after the operator saw it)."""
        self.known_hosts = known_hosts
        self.accept_new = accept_new
        self.verdict: str | None = None  # "unknown" | "changed" | "revoked" | "accepted"
        self.fingerprint = ""
        self.where = ""
        self.revoked_ca = False  # the server's certificate was signed by a revoked CA key

    def __call__(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.fingerprint = key.get_fingerprint("sha256")
        name = host if port == 22 else f"[{host}]:{port}"
        self.where = name
        known, revoked = known_keys(self.known_hosts, host, addr, port)
        if is_revoked(key, revoked):  # before any trust: a revoked key is never stored
            self.verdict = "revoked"
            return False
        if known:
            self.verdict = "changed"
            return False
        if not self.accept_new or (isinstance(self.accept_new, str)
                                   and self.accept_new != self.fingerprint):
            self.verdict = "unknown"
            return False
        line = f"{name} {' '.join(key.export_public_key('openssh').decode().split()[:2])}\n"
        self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.known_hosts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(line)
        self.verdict = "accepted"
        return True


class KeyTypeProbe(HostKeyCheck):
    """Looks at the key a server offers when known_hosts is not allowed to narrow the
    algorithms: a server whose known key was ed25519 and now offers only RSA fails the narrowed
    handshake with "no matching host key type" (the client sees a reset), which is a changed
    host key, not a network fault. Never accepts: the probe connection is always refused."""

    offered = "?"
    known_types: tuple[str, ...] = ()

    def __call__(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.fingerprint = key.get_fingerprint("sha256")
        self.where = host if port == 22 else f"[{host}]:{port}"
        known = known_keys(self.known_hosts, host, addr, port)[0]
        if any(k.public_data == key.public_data for k in known):
            self.verdict = "same"
        else:
            self.verdict = "changed" if known else "unknown"
        self.offered = key.get_algorithm()
        self.known_types = tuple(sorted({k.get_algorithm() for k in known}))
        return False



def host_key_error(check: HostKeyCheck, box: str, known_hosts: Path) -> HostKeyError:
    """The one-line refusal for a key the check did not accept."""
    if check.verdict == "revoked":
        offered = (f"a certificate signed by a CA key that {known_hosts} marks @revoked"
                   if check.revoked_ca else
                   f"{check.fingerprint or 'a key'}, which {known_hosts} marks @revoked")
        return HostKeyError(
            f"HOST KEY REVOKED for {box}: the server offered {offered}. Refusing to connect; a "
            f"revoked key is never trusted or stored, {ACCEPT_FLAG} included",
            verdict="revoked", fingerprint=check.fingerprint, known_hosts=str(known_hosts))
    if check.verdict == "changed":
        return HostKeyError(
            f"HOST KEY CHANGED for {box}: the server offered {check.fingerprint}, which does "
            f"not match {known_hosts} (possible man-in-the-middle attack). Refusing to "
            "connect; if the box was really reinstalled, remove its old line from that file",
            verdict="changed", fingerprint=check.fingerprint, known_hosts=str(known_hosts))
    return HostKeyError(
        f"unknown host key for {box}: {check.fingerprint or '(no fingerprint)'} is not in "
        f"{known_hosts}; check it and rerun with {ACCEPT_FLAG} to trust and store it",
        verdict="unknown", fingerprint=check.fingerprint, known_hosts=str(known_hosts))


def key_type_error(probe: KeyTypeProbe, box: str, known_hosts: Path) -> HostKeyError:
    """The refusal for a server that now offers only key types known_hosts does not hold."""
    return HostKeyError(
        f"HOST KEY CHANGED for {box}: the server now offers only "
        f"{probe.offered} {probe.fingerprint}, while {known_hosts} "
        f"holds {', '.join(probe.known_types) or 'other'} key(s) for it "
        "(possible man-in-the-middle attack). Refusing to connect; if the box was really "
        "reinstalled, remove its old line from that file",
        verdict="changed", fingerprint=probe.fingerprint, known_hosts=str(known_hosts))


def ca_only_error(probe: KeyTypeProbe, box: str, known_hosts: Path) -> HostKeyError:
    """No host key known, yet asyncssh narrowed the handshake: known_hosts holds only
    @cert-authority keys for the box (asyncssh then asks for certificates alone) and the server
    presents a plain key. OpenSSH calls that key unknown too."""
    return HostKeyError(
        f"unknown host key for {box}: {probe.fingerprint} is not in {known_hosts}, which holds "
        "only @cert-authority keys for it, and the server presents no certificate; add the key "
        "to that file if it is the box's",
        verdict="unknown", fingerprint=probe.fingerprint, known_hosts=str(known_hosts))
