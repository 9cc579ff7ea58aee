"""The SSH transport against a real OpenSSH sshd on loopback: host keys, auth and reachability
errors, one reused connection, SFTP, port forwarding, and tails that survive 20 network drops."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import asyncssh
import pytest

from remote.errors import AuthFailed, ConnectionFailed, HostKeyError
from remote.jobs.client import Jobs
from remote.link import ssh
from remote.link.hosts import HostConfig
from remote.spine import events as ev
from remote.spine.bus import EventBus
from tests.sshd_harness import Sshd, free_port

pytestmark = pytest.mark.ssh


def _host(sshd: Sshd, known_hosts: Path, **opts: object) -> HostConfig:
    return sshd.host_config(ssh_options={"ssh_config": str(sshd.ssh_config),
                                         "known_hosts": str(known_hosts), **opts})


async def test_unknown_host_key_is_refused_with_fingerprint_and_flag(sshd: Sshd,
                                                                     tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    t = ssh.SSHTransport(_host(sshd, known))
    with pytest.raises(HostKeyError) as caught:
        await t.connect()
    fingerprint = asyncssh.read_public_key(str(sshd.host_key_pub)).get_fingerprint()
    msg = str(caught.value)
    assert fingerprint in msg and "--accept-new-host-key" in msg and "\n" not in msg
    assert caught.value.exit_code == 3
    assert not known.exists()


async def test_accepted_host_key_is_stored_and_then_trusted(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"
    bus = EventBus()
    seen: list[ev.Event] = []
    bus.add_callback(seen.append)
    t = ssh.SSHTransport(_host(sshd, known), accept_new_host_key=True, bus=bus)
    await t.connect()
    assert (await t.run(["echo", "in"])).stdout == "in\n"
    await t.close()
    stored = known.read_text()
    assert stored.startswith(f"[127.0.0.1]:{sshd.port} ssh-ed25519 ")
    assert sshd.host_key_pub.read_text().split()[1] in stored
    assert any(e.kind == ev.CONSOLE_WARNING and "trusted new host key" in e.payload["message"]
               for e in seen)
    again = ssh.SSHTransport(_host(sshd, known))  # no flag needed any more
    await again.connect()
    await again.close()
    assert known.read_text() == stored  # not stored twice


async def test_changed_host_key_is_refused_even_with_accept_flag(sshd: Sshd,
                                                                 tmp_path: Path) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    for accept in (False, True):
        t = ssh.SSHTransport(_host(sshd, known), accept_new_host_key=accept)
        with pytest.raises(HostKeyError, match=r"HOST KEY CHANGED.*man-in-the-middle"):
            await t.connect()
    assert known.read_text().count("\n") == 1  # never rewritten


async def test_auth_failure_is_one_clear_line(sshd: Sshd, tmp_path: Path) -> None:
    stranger = tmp_path / "id_stranger"
    stranger.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
    stranger.chmod(0o600)
    t = ssh.SSHTransport(_host(sshd, sshd.known_hosts, identity_file=str(stranger)))
    with pytest.raises(AuthFailed) as caught:
        await t.connect()
    assert "authentication" in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.exit_code == 3


async def test_unreachable_host_is_one_clear_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    host = HostConfig(name="gone", ssh="127.0.0.1", ssh_options={
        "port": port, "known_hosts": str(tmp_path / "kh"), "connect_timeout": 3.0})
    with pytest.raises(ConnectionFailed, match=r"cannot reach gone") as caught:
        await ssh.SSHTransport(host).connect()
    assert caught.value.exit_code == 3 and "\n" not in str(caught.value)


async def test_explicit_options_without_ssh_config(sshd: Sshd) -> None:
    host = HostConfig(name="direct", ssh=f"{sshd.user}@127.0.0.1", ssh_options={
        "port": sshd.port, "identity_file": str(sshd.client_key),
        "known_hosts": str(sshd.known_hosts), "keepalive_interval": 5.0})
    t = ssh.SSHTransport(host)
    await t.connect()
    try:
        assert t.keepalive_interval == 5.0
        assert (await t.run(["sh", "-c", "echo $0 $1", "a b", "c;d"])).stdout == "a b c;d\n"
    finally:
        await t.close()


async def test_one_connection_reused_for_commands_and_files(sshd: Sshd, tmp_path: Path) -> None:
    t = ssh.SSHTransport(sshd.host_config())
    await t.connect()
    try:
        before = len(sshd.serving_children())
        results = await asyncio.gather(*(t.run(["echo", str(i)]) for i in range(8)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
        src = tmp_path / "src file"
        src.write_bytes(b"x" * 300_000)
        seen: list[tuple[int, int]] = []
        remote = str(tmp_path / "dir with space" / "it's here")
        await t.put(src, remote, lambda d, n: seen.append((d, n)))
        assert Path(remote).read_bytes() == src.read_bytes()
        assert seen[-1] == (300_000, 300_000)
        back = tmp_path / "back"
        await t.get(remote, back)
        assert back.read_bytes() == src.read_bytes()
        assert len(sshd.serving_children()) == before  # no new connection was opened
    finally:
        await t.close()


async def test_port_forward_survives_reconnect(sshd: Sshd) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"echo:" + await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    bus = EventBus()
    t = ssh.SSHTransport(sshd.host_config(), bus=bus, backoff_base=0.05)
    await t.connect()
    try:
        fwd = await t.forward(port)

        async def ask() -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", fwd.local_port)
            writer.write(b"hi\n")
            data = await reader.read()
            writer.close()
            return data

        assert await ask() == b"echo:hi\n"
        sshd.drop_connections()
        await _until(lambda: not t.connected)
        await t.run(["true"])  # reconnects
        assert await ask() == b"echo:hi\n"
        await fwd.close()
    finally:
        await t.close()
        server.close()


async def _until(cond: object, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if cond():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


@pytest.mark.slow
async def test_tail_survives_twenty_connection_drops(sshd: Sshd, tmp_path: Path) -> None:
    bus = EventBus()
    seen: list[ev.Event] = []
    bus.add_callback(seen.append)
    t = ssh.SSHTransport(sshd.host_config(), bus=bus, backoff_base=0.05, backoff_cap=0.5)
    await t.connect()
    stop = tmp_path / "stop"
    counter = (
        "import os, sys, time\n"
        "i = 0\n"
        "while not os.path.exists(sys.argv[1]):\n"
        "    i += 1\n"
        "    print(i, flush=True)\n"
        "    time.sleep(0.002)\n"
    )
    jobs = Jobs(t, str(tmp_path / "box"), host="box", bus=bus, python=sys.executable)
    try:
        info = await jobs.launch([sys.executable, "-c", counter, str(stop)], name="counter")
        received: list[int] = []
        drops = 0
        since = 0
        async for line in jobs.tail(info.run_id):
            received.append(int(line.text))
            since += 1
            # Drop once more each time the tail is flowing again on a fresh connection.
            if drops < 20 and t.reconnects == drops and since >= 20:
                assert sshd.drop_connections() >= 1
                drops += 1
                since = 0
            elif drops == 20 and t.reconnects == 20 and not stop.exists():
                stop.touch()
        assert drops == 20
        log_lines = Path(info.log_path).read_text().splitlines()
        assert received == list(range(1, len(log_lines) + 1))
        assert (await jobs.wait(info.run_id)).returncode == 0
    finally:
        stop.touch()
        await t.close()
    kinds = [e.kind for e in seen]
    assert kinds.count(ev.CONNECTION_DOWN) >= 20
    assert kinds.count(ev.CONNECTION_UP) == 21  # the first connect and 20 reconnects
    lines = [e.payload["offset"] for e in seen if e.kind == ev.JOB_LINE]
    assert lines == sorted(set(lines))  # job.line events: no duplicates, in order


async def test_job_survives_drops_and_idempotent_calls_reconnect(sshd: Sshd,
                                                                 tmp_path: Path) -> None:
    bus = EventBus()
    seen: list[ev.Event] = []
    bus.add_callback(seen.append)
    t = ssh.SSHTransport(sshd.host_config(), bus=bus, backoff_base=0.05)
    await t.connect()
    jobs = Jobs(t, str(tmp_path / "box"), host="box", python=sys.executable)
    try:
        info = await jobs.launch(["sh", "-c", "sleep 1; echo survived"], name="survivor")
        sshd.drop_connections()
        await _until(lambda: not t.connected)
        assert (await jobs.status(info.run_id)).state in ("running", "exited")
        sshd.drop_connections()
        await _until(lambda: not t.connected)
        assert [r.run_id for r in await jobs.list()] == [info.run_id]
        sshd.drop_connections()
        done = await jobs.wait(info.run_id)
        assert (done.state, done.returncode) == ("exited", 0)
        assert Path(done.log_path).read_text() == "survived\n"
    finally:
        await t.close()
    assert [e.kind for e in seen].count(ev.CONNECTION_DOWN) >= 2


async def test_proxyjump_from_ssh_config(sshd: Sshd, tmp_path: Path) -> None:
    """ProxyJump through the loopback box to itself: the tunnel is opened over SSH."""
    config = tmp_path / "ssh_config"
    config.write_text(sshd.ssh_config.read_text() + "\n".join([
        "Host via-jump",
        "  HostName 127.0.0.1",
        f"  Port {sshd.port}",
        f"  User {sshd.user}",
        f"  IdentityFile {sshd.client_key}",
        "  ProxyJump loopback-box",
        "",
    ]))
    host = sshd.host_config(ssh="via-jump", ssh_options={
        "ssh_config": str(config), "known_hosts": str(sshd.known_hosts)})
    before = len(sshd.serving_children())
    t = ssh.SSHTransport(host)
    await t.connect()
    try:
        assert (await t.run(["echo", "jumped"])).stdout == "jumped\n"
        assert len(sshd.serving_children()) == before + 2  # the jump and the tunneled session
    finally:
        await t.close()
