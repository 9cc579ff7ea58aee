"""Secrets and file modes: `--env` values never written to the box (meta.json keeps the keys,
as docs/jobs.md says), run directories 0700 with 0600 files, and the laptop's cursors and
known_hosts 0600 in 0700 directories. Over the local transport and the real loopback sshd."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from remote.jobs.client import Jobs
from remote.jobs.cursors import CursorStore
from remote.link import ssh
from remote.link.hosts import HostConfig
from remote.link.transport import LocalTransport, Transport
from tests.sshd_harness import Sshd

SECRET = "hf_SECRET_value_4f1c9e"


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


async def _launch_with_secret(t: Transport, workdir: Path) -> None:
    jobs = Jobs(t, str(workdir), host="box", python=sys.executable)
    # The job proves it got the value without printing it.
    check = 'import os,sys; sys.exit(0 if os.environ.get("HF_TOKEN") == sys.argv[1][::-1] else 7)'
    info = await jobs.launch([sys.executable, "-c", check, SECRET[::-1]], name="secret",
                             env={"HF_TOKEN": SECRET, "OTHER": "x"})
    done = await jobs.wait(info.run_id)
    await jobs.close()
    assert done.returncode == 0, "the job did not receive HF_TOKEN"
    run_dir = workdir / "runs" / info.run_id
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["env"] == ["HF_TOKEN", "OTHER"]
    leaked = [str(p) for p in workdir.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == [], f"the token is on the box in clear: {leaked}"
    assert _mode(run_dir) == 0o700
    for name in ("argv.json", "meta.json", "log", "pid", "supervisor.pid", "exit.json"):
        assert _mode(run_dir / name) == 0o600, name
    assert _mode(workdir / "runs") & 0o077 == 0 and _mode(workdir / "locks") & 0o077 == 0


async def test_env_values_never_on_the_box_local(tmp_path: Path) -> None:
    t = LocalTransport()
    await t.connect()
    try:
        await _launch_with_secret(t, tmp_path / "box")
    finally:
        await t.close()


@pytest.mark.ssh
async def test_env_values_never_on_the_box_over_ssh(sshd: Sshd, tmp_path: Path) -> None:
    t = ssh.SSHTransport(sshd.host_config("box"))
    await t.connect()
    try:
        await _launch_with_secret(t, tmp_path / "box")
    finally:
        await t.close()


def test_cursor_files_are_private(tmp_path: Path) -> None:
    store = CursorStore(tmp_path / "state" / "cursors")
    store.save("box", "20260101T000000Z-x-abcdef", 42)
    path = store.path("box", "20260101T000000Z-x-abcdef")
    assert store.load("box", "20260101T000000Z-x-abcdef") == 42
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700


@pytest.mark.ssh
async def test_accepted_host_key_is_stored_private(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"
    host = HostConfig(name="box", ssh=sshd.alias, ssh_options={
        "ssh_config": str(sshd.ssh_config), "known_hosts": str(known)})
    t = ssh.SSHTransport(host, accept_new_host_key=True)
    await t.connect()
    await t.close()
    assert known.read_text().strip()
    assert _mode(known) == 0o600 and _mode(known.parent) == 0o700
