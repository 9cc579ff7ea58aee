"""One retry policy: dropped connections are retried, a changed host key or refused login ends
every loop at once (issue 18 item 1), against the real sshd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.errors import AuthFailed, ConfigError, ConnectionFailed, HostKeyError
from remote.link.retry import Backoff, is_fatal
from tests.sshd_harness import start_sshd

ROOT = Path(__file__).resolve().parents[3]


async def test_backoff_grows_to_its_cap_and_gives_up_after_the_limit() -> None:
    b = Backoff("ask", base=0.002, cap=0.005, limit=3)
    delays = []
    for _ in range(3):
        await b.failed(ConnectionFailed("dropped"))
        delays.append(b.delay())
    assert delays == [0.002, 0.004, 0.005]
    with pytest.raises(ConnectionFailed, match=r"ask: gave up after 4 tries: dropped"):
        await b.failed(ConnectionFailed("dropped"))
    b.succeeded()
    assert b.failures == 0


@pytest.mark.parametrize("exc", [HostKeyError("HOST KEY CHANGED for box"), AuthFailed("denied"),
                                 ConfigError("console.toml", "hosts.box", "bad")])
async def test_fatal_errors_are_raised_at_once_not_retried(exc: Exception) -> None:
    assert is_fatal(exc)
    b = Backoff("ask", limit=60)
    with pytest.raises(type(exc)) as caught:
        await b.failed(exc)
    assert caught.value is exc and b.failures == 0


@pytest.mark.slow
@pytest.mark.ssh
def test_host_key_changed_mid_tail_ends_the_tail_with_exit_3(tmp_path: Path) -> None:
    """The operator's path: `console jobs tail` following a job when the box comes back with
    another host key. The tail ends at once with the host-key message, not ~60 silent retries,
    and that message is all of stderr: one line, no traceback of the stream merger being closed
    while it ran (issue 33 item 1), and known_hosts is left as it was."""
    box = start_sshd(tmp_path / "sshd")  # its own sshd: this test changes the host key
    config = tmp_path / "console.toml"
    config.write_text(
        "[hosts.box]\n"
        f'ssh = "{box.alias}"\nssh_config = "{box.ssh_config}"\n'
        f'known_hosts = "{box.known_hosts}"\npython = "{sys.executable}"\n'
        f'workdir = "{tmp_path / "box"}"\n')
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_DATA_HOME=str(tmp_path / "data"), PYTHONPATH=str(ROOT))
    stop = tmp_path / "stop"
    ticker = ("import os, sys, time\ni = 0\nwhile not os.path.exists(sys.argv[1]):\n"
              "    i += 1\n    print(i, flush=True)\n    time.sleep(0.05)\n")

    def console(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "console", "jobs", "--host", "box",
                                 "--config", str(config), *args], env=env, cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    try:
        launch = console("launch", "--name", "ticker", "--detach", "--no-record", "--",
                         sys.executable, "-c", ticker, str(stop))
        out, err = launch.communicate(timeout=60)
        assert launch.returncode == 0, err
        run_id = out.split()[-1]
        session = tmp_path / "tail.jsonl"
        tail = console("tail", run_id, "--session", str(session))
        try:
            deadline = time.monotonic() + 60
            while not (session.exists() and session.read_text().count('"job.line') >= 5):
                assert time.monotonic() < deadline and tail.poll() is None, tail.stderr
                time.sleep(0.05)
            known = box.known_hosts.read_bytes()
            box.restart_with_new_host_key()
            out, err = tail.communicate(timeout=120)
        finally:
            if tail.poll() is None:
                tail.kill()
                tail.communicate()
        assert tail.returncode == 3, (out, err)
        assert "HOST KEY CHANGED" in err and "man-in-the-middle" in err, err
        # stderr: the recorder's own "session recorded: PATH" note, then the one error line
        lines = [line for line in err.splitlines() if not line.startswith("session recorded: ")]
        assert len(lines) == 1 and lines[0].startswith("error: HOST KEY CHANGED"), err
        assert len(err.splitlines()) == 2, err
        assert box.known_hosts.read_bytes() == known
        kinds = [json.loads(line)["kind"] for line in session.read_text().splitlines()[1:]
                 if line.strip()]
        # at most the transport's own reconnect attempts before it met the new key: not a loop
        assert kinds.count("connection.retry") <= 3, kinds.count("connection.retry")
        # and the session says why it ended (issue 41), not "reconnecting"
        last = [json.loads(line) for line in session.read_text().splitlines()[1:]
                if '"kind":"connection.' in line][-1]
        assert last["kind"] == "connection.down" and last["payload"]["refused"] == "host key"
        # the old loop also ended with exit 3 after ~60 silent restarts, but with "lost the log
        # stream ... 60 times in a row" instead of the host key message
        assert "times in a row" not in err and "gave up" not in err
    finally:
        stop.touch()
        box.stop()
