"""A server that changes its host key *type* (ed25519 in known_hosts, now RSA only) fails the
narrowed handshake before any key is shown; it must still read as a changed host key (exit 3,
"HOST KEY CHANGED"), never as "Connection reset by peer". Real sshd restarted with an RSA key."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.cli import main
from remote.errors import EXIT_CONNECTION, HostKeyError
from remote.link import ssh
from tests.sshd_harness import SSHD, Sshd, start_sshd

pytestmark = pytest.mark.ssh


def _restart_with_rsa_only(d: Sshd) -> subprocess.Popen[bytes]:
    rsa = d.root / "ssh_host_rsa_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(rsa)],
                   check=True)
    cfg = (d.root / "sshd_config").read_text().replace(
        f"HostKey {d.root / 'ssh_host_ed25519_key'}", f"HostKey {rsa}")
    (d.root / "sshd_config_rsa").write_text(cfg)
    d.stop()
    log = open(d.root / "sshd-rsa.log", "wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d.root / "sshd_config_rsa")],
                            stdout=log, stderr=log)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", d.port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return proc
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "sshd (RSA) did not start"
        time.sleep(0.05)


@pytest.fixture
def rsa_box(tmp_path: Path) -> Iterator[Sshd]:
    d = start_sshd(tmp_path / "sshd")  # known_hosts holds its ed25519 key
    proc = _restart_with_rsa_only(d)
    yield d
    proc.terminate()
    proc.wait(10)


async def test_key_type_change_is_a_host_key_error(rsa_box: Sshd) -> None:
    t = ssh.SSHTransport(rsa_box.host_config("box"), reconnect_attempts=1)
    with pytest.raises(HostKeyError) as info:
        await t.connect()
    msg = str(info.value)
    assert msg.startswith("HOST KEY CHANGED for box") and "ssh-rsa SHA256:" in msg
    assert "ssh-ed25519" in msg and str(rsa_box.known_hosts) in msg
    assert rsa_box.known_hosts.read_text().count("\n") == 1  # nothing was trusted


def test_key_type_change_through_the_cli_is_exit_3(rsa_box: Sshd, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "console.toml").write_text(
        f'[hosts.box]\nssh = "{rsa_box.alias}"\nssh_config = "{rsa_box.ssh_config}"\n'
        f'known_hosts = "{rsa_box.known_hosts}"\n')
    assert main(["probe", "env", "--host", "box", "--no-record"]) == EXIT_CONNECTION
    err = capsys.readouterr().err
    assert "HOST KEY CHANGED" in err and "reset by peer" not in err
