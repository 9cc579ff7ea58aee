"""The harness itself: the OpenSSH client can log in with the generated config and keys."""

from __future__ import annotations

import shutil
import subprocess

from tests.sshd_harness import Sshd


def test_openssh_client_logs_in(sshd: Sshd) -> None:
    assert shutil.which("ssh") is not None, "OpenSSH client not installed (apt-get install openssh-client)"
    out = subprocess.run(
        ["ssh", "-F", str(sshd.ssh_config), "-o", f"UserKnownHostsFile={sshd.known_hosts}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", sshd.alias, "echo", "hello"],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "hello"
