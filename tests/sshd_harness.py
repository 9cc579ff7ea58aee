"""A real OpenSSH sshd on 127.0.0.1 for the tests (recipe: docs/design.md §4).

Keys, known_hosts and an ssh_config file are generated in a temp dir, so the tests connect as a
user would: key auth, host key checked against known_hosts, options from an ssh config file.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from remote.link.hosts import HostConfig

# EAGLE3_SSHD lets a test stand for a machine without sshd (the fixture must then fail).
SSHD = os.environ.get("EAGLE3_SSHD", "/usr/sbin/sshd")


def sshd_available() -> str | None:
    """None when usable, else why the SSH tests cannot run (the fixture fails with it)."""
    if not Path(SSHD).exists():
        return "OpenSSH sshd not installed (run `make test` as root, or apt-get install openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen not found"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Sshd:
    root: Path
    port: int
    user: str
    client_key: Path
    host_key_pub: Path
    known_hosts: Path
    ssh_config: Path
    proc: subprocess.Popen[bytes]

    @property
    def alias(self) -> str:
        return "loopback-box"

    def host_config(self, name: str = "box", **overrides: object) -> HostConfig:
        """A host reached through the generated ssh_config alias, as an operator would."""
        values: dict[str, object] = dict(
            name=name,
            ssh=self.alias,
            python=shutil.which("python3") or "python3",
            workdir=str(self.root / "box-workdir"),
            ssh_options={"ssh_config": str(self.ssh_config), "known_hosts": str(self.known_hosts)},
        )
        values.update(overrides)
        return HostConfig(**values)  # type: ignore[arg-type]

    def console_toml(self, path: Path, name: str = "box", **keys: object) -> Path:
        """`path` written as a console.toml whose host `name` is reached through this sshd as an
        operator's would be (the ssh_config alias, its known_hosts), with `keys` added (python,
        workdir, vllm_url, runtime, ...): the one copy of what every CLI-over-SSH test writes."""
        entries = {"ssh": self.alias, "ssh_config": str(self.ssh_config),
                   "known_hosts": str(self.known_hosts), **{k: str(v) for k, v in keys.items()}}
        path.write_text(f"[hosts.{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in entries.items()))
        return path

    def serving_children(self) -> list[int]:
        """PIDs of the sshd processes serving connections (children of the listener)."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def drop_connections(self) -> int:
        """Simulate a network drop: SIGKILL every process serving a connection."""
        killed = 0
        for pid in self.serving_children():
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        return killed

    def restart_with_new_host_key(self) -> None:
        """The box reinstalled (or an attacker in between): same address, another host key.
        known_hosts keeps the old key, so the next connection must be refused."""
        self.stop()
        key = self.root / "ssh_host_ed25519_key"
        key.unlink()
        Path(f"{key}.pub").unlink()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        self.proc = _spawn(self.root, self.port)

    def restart(self) -> None:
        """The box back on the network: same address, same host key."""
        self.stop()
        self.proc = _spawn(self.root, self.port)

    def stop(self) -> None:
        self.drop_connections()
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_sshd(root: Path) -> Sshd:
    root.mkdir(parents=True, exist_ok=True)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    host_key = root / "ssh_host_ed25519_key"
    client_key = root / "id_ed25519"
    for key in (host_key, client_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    authorized = root / "authorized_keys"
    authorized.write_text(Path(f"{client_key}.pub").read_text())
    authorized.chmod(0o600)
    port = free_port()
    host_pub = Path(f"{host_key}.pub")
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {' '.join(host_pub.read_text().split()[:2])}\n")
    user = getpass.getuser()
    cfg = root / "sshd_config"
    cfg.write_text(
        "\n".join([
            "ListenAddress 127.0.0.1",
            f"Port {port}",
            f"HostKey {host_key}",
            f"PidFile {root / 'sshd.pid'}",
            f"AuthorizedKeysFile {authorized}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "AllowTcpForwarding yes",
            "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE",
            "MaxSessions 100",
            "MaxStartups 100:30:200",
            "",
        ])
    )
    ssh_config = root / "ssh_config"
    ssh_config.write_text(
        "\n".join([
            "Host loopback-box",
            "  HostName 127.0.0.1",
            f"  Port {port}",
            f"  User {user}",
            f"  IdentityFile {client_key}",
            "",
        ])
    )
    proc = _spawn(root, port)
    return Sshd(root, port, user, client_key, host_pub, known_hosts, ssh_config, proc)


def _spawn(root: Path, port: int) -> subprocess.Popen[bytes]:
    """sshd on root's config, once it greets on the port."""
    log = open(root / "sshd.log", "ab")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")], stdout=log,
                            stderr=log)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"sshd did not start: {(root / 'sshd.log').read_text()[-2000:]}")
        time.sleep(0.05)
    return proc
